// Thread-block clusters and distributed shared memory (sm_90+): the CTA's rank in its cluster,
// another CTA's shared memory by address, and the cluster barrier. Every function compiles to
// nothing below sm_90; callers launch their cluster kernels only on devices that have clusters.
#pragma once

#include <cstdint>

namespace latte::cuda {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// The shared::cluster address of `p` (this CTA's shared memory) in the CTA of rank `rank`.
__device__ __forceinline__ uint32_t cluster_smem_addr(const void* p, unsigned rank) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
#endif
  return r;
}

__device__ __forceinline__ void cluster_red_add(uint32_t addr, int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.cluster.shared::cluster.add.s32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ int cluster_ld(uint32_t addr) {
  int v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
#endif
  return v;
}

__device__ __forceinline__ void cluster_ld4(uint32_t addr, int (&v)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
#else
  v[0] = v[1] = v[2] = v[3] = 0;
#endif
}

__device__ __forceinline__ uint64_t cluster_ld64(uint32_t addr) {
  uint64_t v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
#endif
  return v;
}

// The cluster barrier in two halves: every thread of every CTA of the cluster arrives (its
// earlier shared-memory writes, local or remote, released to the cluster), then waits for all
// (acquiring them). Between the two a thread may work on what needs nobody else.
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

}  // namespace latte::cuda
