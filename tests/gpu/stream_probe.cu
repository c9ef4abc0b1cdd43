// Probe kernels of the GPU-side completion tests.
#include <cuda_runtime.h>

#include "stream_probe.h"

namespace kvstash::testing {

namespace {

// Grid: (blocks), each thread striding over bytes.
__global__ void CountMismatchesKernel(const uint8_t* __restrict__ data,  // [bytes]
                                      uint64_t bytes, uint8_t expected,
                                      unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < bytes;
       i += uint64_t(gridDim.x) * blockDim.x) {
    local += data[i] != expected;
  }
  if (local != 0) atomicAdd(mismatches, local);
}

__global__ void SpinKernel(uint64_t nanoseconds) {
  uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= nanoseconds) return;
  }
}

}  // namespace

void EnqueueCountMismatches(const uint8_t* data, uint64_t bytes, uint8_t expected,
                            unsigned long long* mismatches, void* stream) {
  CountMismatchesKernel<<<256, 256, 0, static_cast<cudaStream_t>(stream)>>>(data, bytes, expected,
                                                                            mismatches);
}

void EnqueueSpin(uint32_t microseconds, void* stream) {
  SpinKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(uint64_t(microseconds) * 1000);
}

}  // namespace kvstash::testing
