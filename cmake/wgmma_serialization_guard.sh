#!/bin/sh
# Compiler launcher of the sm_90a kernels (latte_sm90a_objects in src/CMakeLists.txt): runs the
# compile and fails it when ptxas reports that it serialized wgmma ("Potential Performance Loss:
# wgmma.mma_async instructions are serialized ..."). Such a kernel is still correct, but every
# wgmma waits for the previous one to finish: a silent slowdown that only a benchmark shows.
log=$(mktemp) || exit 1
"$@" >"$log" 2>&1
rc=$?
cat "$log" >&2
if [ "$rc" -eq 0 ] && grep -q "wgmma.mma_async instructions are serialized" "$log"; then
  echo "wgmma_serialization_guard: ptxas serialized the wgmma of a kernel above (see its C75xx" \
       "line for the cause: registers, a wgmma in a non-uniform branch, an accumulator touched" \
       "while a wgmma is in flight); fix the kernel (docs/kernels/hopper_mla.md, \"Keeping" \
       "wgmma asynchronous\")" >&2
  prev=""
  for a in "$@"; do  # remove the object so that the next build compiles it again
    [ "$prev" = "-o" ] && rm -f "$a"
    prev=$a
  done
  rc=1
fi
rm -f "$log"
exit "$rc"
