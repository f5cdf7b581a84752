#!/usr/bin/env bash
# One device call for cuda.sparse_mla: GPU tests, compute-sanitizer (memcheck, racecheck) on a
# small filter, and the benchmark with its PyTorch peer. Run from the repository root on the GPU
# machine with the binaries staged in .gpu/attn (liblatte.so*, test_cuda_sparse_mla,
# bench_sparse_mla) and scripts/stage-device-libs' .deps carried.
#   bench/sparse_mla/device_check.sh [tests] [memcheck] [racecheck] [bench] [bench-filter=S]
#        [env:VAR=VALUE (bench again without the peer, with VAR set)]
#        [lib:DIR (bench again without the peer, with the liblatte.so of DIR, e.g. a base build)]
#        [sass] [ncu=FILTER_WORD] [ncu-src=FILTER_WORD (executed instructions per SASS line, csv)]
#        [pipes=FILTER_WORD (tensor pipe, shared-memory wavefronts, issue slots and stalls per issue)]
#        (in filters, '_' stands for a space)
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/attn:$PWD/.deps/lib:${LD_LIBRARY_PATH:-}
cublas_dir=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null || true)
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib "$cublas_dir"; do
  if [ -n "$d" ] && [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
done
OUT=${OUT:-/tmp/sparse_mla_out}
mkdir -p "$OUT"
T=.gpu/attn/test_cuda_sparse_mla
B=.gpu/attn/bench_sparse_mla
filter=""
# Nsight Compute on one launch of the forward kernels (the 4th: after warm-up), clocks as they run
ncu_one=(ncu --clock-control none -k regex:mla_ --launch-skip 3 --launch-count 1)
steps="$*"
[ -z "$steps" ] && steps="tests memcheck racecheck bench"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for step in $steps; do
  case $step in
  bench-filter=*) filter=$(echo "${step#bench-filter=}" | tr '_' ' ');;  # '_' stands for ' ' 
  tests)
    echo "== tests"; start=$(date +%s)
    timeout 150 "$T" --gtest_color=no > "$OUT/tests.log" 2>&1; rc=$?
    grep -E "rel err|oracle|OK \]|FAILED|PASSED|Failure|Expected|Which is|Value of|error|SKIPPED" "$OUT/tests.log" | head -120
    echo "tests rc=$rc ($(( $(date +%s) - start )) s)";;
  memcheck)
    echo "== compute-sanitizer memcheck"; start=$(date +%s)
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_color=no \
      --gtest_filter='*SanitizerSmall*:*CudaGraph*:*Refuses*' > "$OUT/memcheck.log" 2>&1; rc=$?
    grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED|rel err" "$OUT/memcheck.log" | head -30
    echo "memcheck rc=$rc ($(( $(date +%s) - start )) s)";;
  racecheck)
    echo "== compute-sanitizer racecheck"; start=$(date +%s)
    timeout 100 compute-sanitizer --tool racecheck --racecheck-report analysis --error-exitcode 9 "$T" \
      --gtest_color=no --gtest_filter='*SanitizerSmall*' > "$OUT/racecheck.log" 2>&1; rc=$?
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard|Race|PASSED|FAILED" "$OUT/racecheck.log" | head -30
    echo "racecheck rc=$rc ($(( $(date +%s) - start )) s)";;
  bench)
    echo "== bench"; start=$(date +%s)
    PYTHONUNBUFFERED=1 timeout 150 python3 bench/sparse_mla/run_bench.py --bin "$B" --filter "$filter" \
      --iters 25 --peer-iters 20 --md "$OUT/bench.md" > "$OUT/bench.log" 2>&1; rc=$?
    tail -40 "$OUT/bench.log"
    echo "bench rc=$rc ($(( $(date +%s) - start )) s)";;
  ncu=*)
    f=$(echo "${step#ncu=}" | tr '_' ' ')  # '_' stands for ' ' (shape names have none)
    n=$(echo "$f" | tr -c 'A-Za-z0-9' '_')
    echo "== ncu '$f'"
    LATTE_BENCH_QUICK=1 timeout 150 "${ncu_one[@]}" \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section WarpStateStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum" \
      "$B" "$f" 5 > "$OUT/ncu_$n.log" 2>&1
    grep -E "Duration|SM Frequency|Throughput|Warp Cycles|Achieved Occupancy|Theoretical Occ|Block Limit|Registers Per|stalled_[a-z_]*_per_issue_active.ratio +[a-z]* +[0-9.]*[1-9]|Issue Slots|No Eligible|inst_executed|L2 Hit|Mem Busy|Max Bandwidth|L1/TEX Hit|Bank" "$OUT/ncu_$n.log" | head -60
    ;;
  pipes=*)
    f=$(echo "${step#pipes=}" | tr '_' ' ')
    echo "== ncu pipes '$f'"
    m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
    m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
    m=$m,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
    m=$m,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum
    m=$m,smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_pipe_tensor_op_hmma.sum
    LATTE_BENCH_QUICK=1 timeout 150 "${ncu_one[@]}" \
      --metrics "$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" "$B" "$f" 5 2>&1 | \
      grep -E "^ +(sm|l1tex|smsp|gpu)__" | awk '$NF+0 > 0.05'
    ;;
  ncu-src=*)
    f=$(echo "${step#ncu-src=}" | tr '_' ' ')
    n=$(echo "$f" | tr -c 'A-Za-z0-9' '_')
    echo "== ncu source counters '$f'"
    LATTE_BENCH_QUICK=1 timeout 150 "${ncu_one[@]}" \
      --section SourceCounters --section SpeedOfLight --import-source no -f -o "$OUT/src_$n" "$B" "$f" 5 \
      > "$OUT/ncu_src_$n.log" 2>&1
    tail -3 "$OUT/ncu_src_$n.log"
    ncu -i "$OUT/src_$n.ncu-rep" --page source --csv --print-source sass > "$OUT/src_$n.csv" 2> "$OUT/src_$n.err"
    echo "source page rc=$? lines $(wc -l < "$OUT/src_$n.csv")"; head -c 600 "$OUT/src_$n.err"
    head -c 400 "$OUT/src_$n.csv"; echo
    ;;
  sass)
    echo "== sass opcode histogram (fp8, 32 rows, sparse)"
    cuobjdump -sass .gpu/attn/liblatte.so.0.1.0 > "$OUT/latte.sass" 2>&1
    awk '/Function : .*mla_fwd_sm80_kernelILb1ELi32ELb0E/{f=1;next} /Function :/{f=0} f' "$OUT/latte.sass" > "$OUT/fp8_32.sass"
    grep -oE '/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' "$OUT/fp8_32.sass" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '; echo
    ;;
  env:*|lib:*)
    if [ "${step%%:*}" = env ]; then kv=${step#env:}; pre=""; else kv=LATTE_BENCH_LIB=${step#lib:}; pre=${step#lib:}:; fi
    echo "== bench (no peer) with $kv, filter '$filter' (time = queued, sync = synchronous, graph = graph replay)"
    LD_LIBRARY_PATH=$pre$LD_LIBRARY_PATH LATTE_BENCH_QUICK=1 env "$kv" timeout 120 "$B" "$filter" 20 2>&1 | \
      python3 -c "import sys,json
for l in sys.stdin:
    l=l.strip()
    if not l.startswith('{'): print(l); continue
    d=json.loads(l)
    if 'name' in d: print('%-34s time %8.1f us  sync %8.1f us  graph %8.1f us  host %5.1f us %7.1f TFLOP/s %6.0f GB/s' % (d['name'], d['time_us'], d.get('sync_us', 0), d.get('graph_us', 0), d.get('host_us', 0), d['tflops'], d['gbs']))"
    ;;
  esac
done
