// Plan arenas.
#include "cuda_copy_plan.h"

#include <algorithm>
#include <cstring>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::server {

namespace {

constexpr uint64_t kMinArenaBytes = 256 * 1024;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

uint64_t FlatChunkBytes(const std::vector<GroupAddresses>& groups) {
  uint64_t end = 0;
  for (const GroupAddresses& g : groups) {
    end = std::max(end, g.group.flat_offset_bytes + FlatGroupBytes(g.group.shape));
  }
  return AlignUp(end, kGroupAlignmentBytes);
}

Status CopyPlan::Build(const std::vector<GroupAddresses>& groups,
                       const std::vector<kernels::ChunkCopy>& chunks,
                       const std::vector<uint8_t*>& flats) {
  // Layer addresses first, then the entries (8-byte aligned), block ids last.
  uint64_t bases = 0;
  for (const GroupAddresses& g : groups) bases += g.layer_bases.size() * sizeof(uint8_t*);
  uint64_t ids = 0;
  for (const kernels::ChunkCopy& c : chunks) ids += c.num_block_ids;
  const uint64_t entries_offset = AlignUp(bases, alignof(kernels::ChunkCopy));
  const uint64_t ids_offset = entries_offset + chunks.size() * sizeof(kernels::ChunkCopy);
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
  groups_.clear();
  group_bases_offsets_.clear();
  uint64_t offset = 0;
  for (const GroupAddresses& g : groups) {
    const uint64_t size = g.layer_bases.size() * sizeof(uint8_t*);
    std::memcpy(host + offset, g.layer_bases.data(), size);
    groups_.push_back(g.group);
    group_bases_offsets_.push_back(offset);
    offset += size;
  }
  auto* entries = reinterpret_cast<kernels::ChunkCopy*>(host + entries_offset);
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
  entries_offset_ = entries_offset;
  used_bytes_ = bytes;
  return Status::Ok();
}

Status CopyPlan::Upload(cudaStream_t stream) const {
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_.data(), host_.host(), used_bytes_, cudaMemcpyHostToDevice, stream));
  return Status::Ok();
}

kernels::DeviceGroupCopy CopyPlan::Group(size_t g) const {
  return kernels::DeviceGroupCopy{
      groups_[g], reinterpret_cast<uint8_t* const*>(device_.data() + group_bases_offsets_[g])};
}

kernels::DeviceChunkBatch CopyPlan::Slice(size_t begin, size_t count) const {
  const auto* host = reinterpret_cast<const kernels::ChunkCopy*>(host_.host() + entries_offset_);
  const auto* device =
      reinterpret_cast<const kernels::ChunkCopy*>(device_.data() + entries_offset_);
  return kernels::DeviceChunkBatch{host + begin, device + begin, count};
}

}  // namespace kvstash::server
