#!/usr/bin/env python3
# Splits an Nsight Compute source-counter export (`ncu --page source --csv --print-source sass`,
# as written by bench/sparse_mla/device_check.sh ncu-src=...) into regions of one kernel: before
# the main loop (the backward branch that spans the most HMMA), each stretch of the loop between
# block barriers, and after it. Prints per region: share of stall samples, instructions and
# HMMA per warp and loop iteration, and the five leading stall reasons.
# --roles: for a warp-specialized kernel (hopper.mla), regions cut at each setmaxnreg and EXIT
# instead (prologue, one consumer warpgroup's code, the other's, the producer's, ...): each
# region's share of the samples is its warps' share of the time; prints its leading stall
# reasons and its three most sampled instructions.
# Usage: ncu_regions.py [--roles] FILE.csv
import csv,sys,re,collections
roles='--roles' in sys.argv
rows=list(csv.reader(open([a for a in sys.argv[1:] if a!='--roles'][0])))
hdr=rows[1]; data=rows[2:]
ad=hdr.index('Address'); ss=hdr.index('Warp Stall Sampling (All Samples)'); ie=hdr.index('Instructions Executed'); src=hdr.index('Source')
cols=[i for i,h in enumerate(hdr) if h.startswith('stall_') and 'Not Issued' not in h]
addr=[int(r[ad],16) for r in data]
if roles:
    T=sum(float(r[ss] or 0) for r in data)
    cuts=[0]+[i+1 for i,r in enumerate(data) if 'SETMAXREG' in r[src] or re.match(r'\s*EXIT',r[src])]+[len(data)]
    for a,b in zip(cuts,cuts[1:]):
        rs=data[a:b]; s=sum(float(r[ss] or 0) for r in rs)
        if s<0.01*T: continue
        c=collections.Counter()
        for r in rs:
            for i in cols: c[hdr[i][6:]]+=float(r[i] or 0)
        print(f'[{a},{b}) samples {s/T*100:5.1f}%  ', ' '.join(f'{k}:{v/max(s,1)*100:.0f}' for k,v in c.most_common(5)))
        for r in sorted(rs,key=lambda r:-float(r[ss] or 0))[:3]:
            top=max(cols,key=lambda i:float(r[i] or 0))
            print(f'    {float(r[ss] or 0)/T*100:5.1f}% {hdr[top][6:]:12s} {r[src].strip()[:70]}')
    sys.exit(0)
# main loop: backward branch spanning most HMMA
best=None
for i,r in enumerate(data):
    m=re.search(r'BRA (0x[0-9a-f]+)',r[src])
    if m:
        t=int(m.group(1),16)
        if t<addr[i]:
            h=sum(1 for j,x in enumerate(data) if t<=addr[j]<=addr[i] and 'HMMA' in x[src])
            if best is None or h>best[0]: best=(h,t,addr[i])
_,lo,hi=best
# per-tile executions = executed count of the loop's last instruction
per=[float(data[i][ie] or 0) for i in range(len(data)) if addr[i]==hi][0]
T=sum(float(r[ss] or 0) for r in data)
segs=[]; cur=['pre',[]]
for i,r in enumerate(data):
    a=addr[i]
    if a==lo: segs.append(cur); cur=['loop0',[]]
    if lo<=a<=hi and 'BAR.SYNC' in r[src]: segs.append(cur); cur=['loop@'+hex(a&0xffff),[]]
    if a==hi+16: segs.append(cur); cur=['post',[]]
    cur[1].append(r)
segs.append(cur)
print('loop executions (warp-tiles):',per, 'total inst per warp-tile', sum(float(r[ie] or 0) for r in data)/per)
for name,rs in segs:
    s=sum(float(r[ss] or 0) for r in rs); n=sum(float(r[ie] or 0) for r in rs)
    c=collections.Counter()
    for r in rs:
        for i in cols: c[hdr[i][6:]]+=float(r[i] or 0)
    hm=sum(float(r[ie] or 0) for r in rs if 'HMMA' in r[src])
    print(f'{name:14s} samples {s/T*100:5.1f}%  inst/wt {n/per:6.1f} hmma/wt {hm/per:5.1f}  ', ' '.join(f'{k}:{v/max(s,1)*100:.0f}' for k,v in c.most_common(5)))
