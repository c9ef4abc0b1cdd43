// The KV memory of a GPU test engine: a layout's allocations (cudaMalloc),
// filled with pseudo-random bytes from a seed, and a host twin of the same
// bytes. Tests change the twin with the kernels' CPU twins to predict, byte
// for byte, what the GPU must hold after a retrieve.
//
// Not thread-safe. Layers sit at 256-aligned offsets with gaps between them
// inside their allocations, so offsets are never zero and a write past a
// layer shows.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_layouts.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda_memory.h"

namespace kvstash::testing {

using HostAllocations = std::vector<std::vector<uint8_t>>;

class DeviceKv {
 public:
  // Allocates the layout's memory on the current GPU and fills it with the
  // bytes of HostBytes(layout, seed).
  static Result<DeviceKv> Create(const GpuLayout& layout, uint64_t seed);
  // What Create(layout, seed) puts in each allocation, computed on the host.
  static HostAllocations HostBytes(const GpuLayout& layout, uint64_t seed);
  // Bases of every layer inside host copies of the allocations.
  static std::vector<uint8_t*> LayerBases(const GpuLayout& layout, HostAllocations& host);

  std::vector<CudaLayer> Layers() const;
  // The twin: what the GPU memory should hold.
  HostAllocations& twin() { return twin_; }
  // Writes `value` over every (token, head) row of the blocks in the twin,
  // then copies the twin to the GPU.
  Status Poison(const std::vector<uint32_t>& blocks, uint8_t value);
  Result<HostAllocations> Download() const;

 private:
  DeviceKv(GpuLayout layout, HostAllocations twin)
      : layout_(std::move(layout)), twin_(std::move(twin)) {}
  Status Upload();

  GpuLayout layout_;
  HostAllocations twin_;
  std::vector<cuda::DeviceBuffer> allocations_;
};

}  // namespace kvstash::testing
