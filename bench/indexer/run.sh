#!/usr/bin/env bash
# One command on the GPU machine: bench_indexer (latte kernels) and peers.py (PyTorch) in the
# same run, then a markdown table (bench/indexer/report.py). Usage:
#   bench/indexer/run.sh <bench_indexer binary> [--quick] [out_dir]
set -euo pipefail
bin=$1; shift
quick=""
if [ "${1:-}" = "--quick" ]; then quick="--quick"; shift; fi
out=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
"$bin" $quick > "$out/indexer_bench.jsonl"
python3 "$here/peers.py" $quick > "$out/indexer_peers.jsonl"
python3 "$here/report.py" "$out/indexer_bench.jsonl" "$out/indexer_peers.jsonl" | tee "$out/indexer_report.md"
