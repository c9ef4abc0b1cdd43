// Test engine KV memory on the GPU and its host twin.
#include "device_kv.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::testing {

namespace {

constexpr uint64_t kGapBytes = 4096;

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Offset of every layer inside its allocation, and each allocation's size.
struct Placement {
  std::vector<uint64_t> layer_offsets;
  std::vector<uint64_t> allocation_bytes;
};

Placement Place(const GpuLayout& layout) {
  Placement p;
  p.allocation_bytes.assign(layout.num_allocations, kGapBytes);
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    uint64_t& end = p.allocation_bytes[layout.allocation_of_layer[l]];
    p.layer_offsets.push_back(end);
    end = AlignUp(end + LayerExtentBytes(layout.layers[l]), 256) + kGapBytes;
  }
  return p;
}

// splitmix64: fast, and every byte value appears.
void FillRandom(std::vector<uint8_t>& bytes, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(bytes.data() + i, &z, std::min<size_t>(8, bytes.size() - i));
  }
}

}  // namespace

HostAllocations DeviceKv::HostBytes(const GpuLayout& layout, uint64_t seed) {
  const Placement p = Place(layout);
  HostAllocations host;
  for (size_t a = 0; a < p.allocation_bytes.size(); ++a) {
    host.emplace_back(p.allocation_bytes[a]);
    FillRandom(host.back(), seed * 1000003 + a);
  }
  return host;
}

std::vector<uint8_t*> DeviceKv::LayerBases(const GpuLayout& layout, HostAllocations& host) {
  const Placement p = Place(layout);
  std::vector<uint8_t*> bases;
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    bases.push_back(host[layout.allocation_of_layer[l]].data() + p.layer_offsets[l]);
  }
  return bases;
}

Result<DeviceKv> DeviceKv::Create(const GpuLayout& layout, uint64_t seed) {
  DeviceKv kv(layout, HostBytes(layout, seed));
  for (const std::vector<uint8_t>& bytes : kv.twin_) {
    Result<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(bytes.size());
    if (!buffer.ok()) return buffer.status();
    kv.allocations_.push_back(std::move(*buffer));
  }
  KVSTASH_RETURN_IF_ERROR(kv.Upload());
  return kv;
}

std::vector<CudaLayer> DeviceKv::Layers() const {
  const Placement p = Place(layout_);
  std::vector<CudaLayer> layers;
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    layers.push_back({allocations_[layout_.allocation_of_layer[l]].data() + p.layer_offsets[l],
                      layout_.layers[l]});
  }
  return layers;
}

Status DeviceKv::Poison(const std::vector<uint32_t>& blocks, uint8_t value) {
  const std::vector<uint8_t*> bases = LayerBases(layout_, twin_);
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    const LayerGeometry& g = layout_.layers[l];
    for (uint32_t block : blocks) {
      for (uint32_t kv = 0; kv < g.kv_count; ++kv) {
        for (uint32_t t = 0; t < g.block_tokens; ++t) {
          for (uint32_t h = 0; h < g.num_heads; ++h) {
            std::memset(bases[l] + PagedOffset(g, block, kv, t, h), value, g.head_bytes);
          }
        }
      }
    }
  }
  return Upload();
}

Status DeviceKv::Upload() {
  for (size_t a = 0; a < twin_.size(); ++a) {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy(allocations_[a].data(), twin_[a].data(),
                                            twin_[a].size(), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

Result<HostAllocations> DeviceKv::Download() const {
  HostAllocations host;
  for (const cuda::DeviceBuffer& allocation : allocations_) {
    host.emplace_back(allocation.size());
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.back().data(), allocation.data(),
                                            allocation.size(), cudaMemcpyDeviceToHost));
  }
  return host;
}

}  // namespace kvstash::testing
