// Programmatic dependent launch (sm_90+). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the previous kernel in
// its stream still runs, once every CTA of that kernel has called pdl_launch_dependents (or
// exited). Before pdl_wait it may read only what was written before the previous kernel
// started; pdl_wait returns once the previous kernel has completed and its writes are visible
// (and so every kernel before it). Both are no-ops below sm_90 and without the attribute.
#pragma once

namespace latte::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace latte::cuda
