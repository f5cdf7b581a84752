#!/usr/bin/env bash
# On the H200 (carry .gpu/all, .deps): the mma.sync ceilings, the indexer benchmark for a few
# decode shapes and an Nsight Compute profile of the score kernel. Output: $OUT.
#   scripts/diag/indexer_profile.sh [ceilings] [shape=B,ctx,H ...] [ncu=B,ctx,H[,skip]] [stress]
#     [tests] [timeline=B,ctx,H] [env:VAR=VALUE (for the steps after it)]
#     [ncu-src=B,ctx,H,fused|unfused,SKIP (per-SASS-line counters of one score kernel launch)]
#     [lib:DIR=B,ctx,H (the decode line of .gpu/all's liblatte and of DIR's, alternated in three
#      rounds, each a process of its own: a kernel change against the staged build)]
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/all:$PWD/.deps/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/indexer-profile}
mkdir -p "$OUT"
bench=.gpu/all/bench/latte_bench_indexer
for step in "$@"; do
  case $step in
  env:*) export "${step#env:}"; echo "== ${step#env:}";;
  tests)
    for t in latte_cuda_indexer_test latte_cuda_indexer_slices_test; do
      timeout 200 .gpu/all/tests/$t --gtest_color=no > "$OUT/$t.log" 2>&1
      echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
      grep -E '^\[  FAILED  \]|Failure$' "$OUT/$t.log" | head -5
    done;;
  stress)
    timeout 200 .gpu/all/tests/latte_cuda_select_stress_test --gtest_color=no > "$OUT/stress.log" 2>&1
    echo "stress rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/stress.log" | tr '\n' ' ')";;
  ceilings)
    .gpu/all/bench/bench_ceiling_mma_sync_rate 4 && .gpu/all/bench/bench_ceiling_mma_sync_rate 8;;
  shape=*)
    timeout 200 $bench --shape "${step#shape=}" 2>&1 | grep -E "^decode|^ab |copy";;
  lib:*)
    spec=${step#lib:}; dir=${spec%%=*}; shape=${spec#*=}
    for round in 1 2 3; do
      for lib in .gpu/all "$dir"; do
        line=$(LD_LIBRARY_PATH=$PWD/$lib:$PWD/.deps/lib timeout 200 $bench --shape "$shape" 2>&1 | grep -E "^decode")
        echo "round $round $(printf '%-10s' "$lib") $line"
      done
    done;;
  timeline=*)
    # Kernel spans of both paths with PDL overlap (LATTE_CUDA_TOPK_PROF=1; every 20th call).
    LATTE_CUDA_TOPK_PROF=1 timeout 200 $bench --shape "${step#timeline=}" 2>&1 | grep -A2 -E "^topk prof (fused path|unfused)" | grep -v "^--" | tail -12;;
  kernels=*)
    # Durations of the first call's kernels of one path (ncu; LATTE_BENCH_ONLY, default fused).
    LATTE_BENCH_ONLY=${LATTE_BENCH_ONLY:-fused} timeout 200 ncu --clock-control none -k regex:'indexer|topk' -c "${KCOUNT:-10}" \
      --metrics gpu__time_duration.sum $bench --shape "${step#kernels=}" 2>&1 |
      grep -E "^  [a-z_]+.*(indexer_score_kernel|topk_)|gpu__time_duration" | sed -E 's/\(latte::cuda_indexer::[A-Za-z]+\)//; s/ +/ /g' | paste - - | cut -c1-160;;
  ncu-src=*)
    # Executed instructions and stall samples per SASS line of one score kernel launch (csv):
    # ncu-src=B,ctx,H,PATH,SKIP with PATH fused|unfused (LATTE_BENCH_ONLY) and SKIP the score
    # kernel launches to pass over (fused: 0 sample, 1 admission; unfused: 0 keys).
    IFS=, read -r b c h only skip <<< "${step#ncu-src=}"
    rep=$OUT/src_${b}_${c}_${h}_${only}_${skip}
    LATTE_BENCH_ONLY=$only timeout 300 ncu --clock-control none -k regex:indexer_score_kernel --launch-skip "$skip" -c 1 \
      --section SourceCounters --section SpeedOfLight --import-source no -f -o "$rep" $bench --shape "$b,$c,$h" > "$rep.log" 2>&1
    echo "ncu-src $b,$c,$h $only skip $skip rc=$?"
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>&1
    ncu --import "$rep.ncu-rep" --page details 2>&1 | grep -E "Duration|SM Frequency|Compute \(SM\)|DRAM Throughput" | head -5;;
  ncu=*)
    IFS=, read -r b c h skip <<< "${step#ncu=}"
    rep=$OUT/score_${b}_${c}_${h}_${skip:-0}
    timeout 300 ncu --clock-control none -k regex:indexer_score_kernel --launch-skip "${skip:-0}" -c 1 \
      --set full --import-source no -o "$rep" $bench --shape "$b,$c,$h" > /dev/null 2>&1
    ncu --import "$rep.ncu-rep" --page details > "$rep.txt" 2>&1
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.sass.csv" 2>&1
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Executed Ipc A|Issue Slots Busy|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|L2 Hit|Block Limit" "$rep.txt" | head -40
    grep -A30 "Section: Warp State Statistics" "$rep.txt" | grep -iE "stall|cycles" | head -12;;
  esac
done
