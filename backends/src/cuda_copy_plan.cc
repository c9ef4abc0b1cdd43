// Layer address uploads and plan arenas.
#include "cuda_copy_plan.h"

#include <algorithm>
#include <cstring>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

constexpr uint64_t kMinArenaBytes = 256 * 1024;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

Result<LayerAddresses> LayerAddresses::Upload(const std::vector<GroupAddresses>& groups,
                                              cudaStream_t stream) {
  LayerAddresses out;
  std::vector<uint8_t*> all;
  std::vector<uint64_t> offsets;  // per group, in pointers
  for (const GroupAddresses& g : groups) {
    offsets.push_back(all.size());
    all.insert(all.end(), g.layer_bases.begin(), g.layer_bases.end());
  }
  const uint64_t bytes = std::max<uint64_t>(1, all.size()) * sizeof(uint8_t*);
  Result<cuda::DeviceBuffer> device = cuda::DeviceBuffer::Allocate(bytes);
  if (!device.ok()) return device.status();
  out.device_ = std::move(*device);
  const auto* device_bases = reinterpret_cast<uint8_t* const*>(out.device_.data());
  for (size_t g = 0; g < groups.size(); ++g) {
    kernels::GroupCopy group = groups[g].group;
    group.layer_bases = groups[g].layer_bases.data();
    Result<kernels::PreparedGroup> prepared =
        kernels::PrepareGroup(kernels::DeviceGroupCopy{group, device_bases + offsets[g]});
    if (!prepared.ok()) return prepared.status();
    out.groups_.push_back(*prepared);
  }
  if (!all.empty()) {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.device_.data(), all.data(),
                                                 all.size() * sizeof(uint8_t*),
                                                 cudaMemcpyHostToDevice, stream));
    // Once per registration and lane: `all` is freed on return.
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return out;
}

Status CopyPlan::Build(const std::vector<kernels::ChunkCopy>& chunks,
                       const std::vector<uint8_t*>& flats) {
  // The entries first, the block ids after them.
  uint64_t ids = 0;
  for (const kernels::ChunkCopy& c : chunks) ids += c.num_block_ids;
  const uint64_t ids_offset = AlignUp(chunks.size() * sizeof(kernels::ChunkCopy), 16);
  const uint64_t bytes = ids_offset + ids * sizeof(uint32_t);
  if (bytes > host_.size()) {
    const uint64_t size = std::max({bytes, 2 * uint64_t(host_.size()), kMinArenaBytes});
    host_ = cuda::PinnedHostBuffer();  // free the old arenas before taking larger ones
    device_ = cuda::DeviceBuffer();
    Result<cuda::PinnedHostBuffer> host = cuda::PinnedHostBuffer::Allocate(size);
    if (!host.ok()) return host.status();
    Result<cuda::DeviceBuffer> device = cuda::DeviceBuffer::Allocate(size);
    if (!device.ok()) return device.status();
    host_ = std::move(*host);
    device_ = std::move(*device);
  }
  uint8_t* const host = host_.host();
  uint8_t* const device = device_.data();
  auto* entries = reinterpret_cast<kernels::ChunkCopy*>(host);
  auto* host_ids = reinterpret_cast<uint32_t*>(host + ids_offset);
  auto* device_ids = reinterpret_cast<const uint32_t*>(device + ids_offset);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const kernels::ChunkCopy& c = chunks[i];
    std::memcpy(host_ids, c.block_ids, c.num_block_ids * sizeof(uint32_t));
    entries[i] =
        kernels::ChunkCopy{flats[i], device_ids, c.num_block_ids, c.num_tokens, c.skip_tokens};
    host_ids += c.num_block_ids;
    device_ids += c.num_block_ids;
  }
  used_bytes_ = bytes;
  return Status::Ok();
}

Status CopyPlan::Upload(cudaStream_t stream) const {
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_.data(), host_.host(), used_bytes_, cudaMemcpyHostToDevice, stream));
  return Status::Ok();
}

kernels::DeviceChunkBatch CopyPlan::Slice(size_t begin, size_t count) const {
  const auto* host = reinterpret_cast<const kernels::ChunkCopy*>(host_.host());
  const auto* device = reinterpret_cast<const kernels::ChunkCopy*>(device_.data());
  return kernels::DeviceChunkBatch{host + begin, device + begin, count};
}

}  // namespace kvstash::backends
