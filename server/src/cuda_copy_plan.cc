// Plan arenas.
#include "cuda_copy_plan.h"

#include <algorithm>
#include <cstring>

namespace kvstash::server {

namespace {

constexpr uint64_t kMinArenaBytes = 256 * 1024;

}  // namespace

uint64_t FlatChunkBytes(const std::vector<GroupAddresses>& groups) {
  uint64_t end = 0;
  for (const GroupAddresses& g : groups) {
    end = std::max(end, g.group.flat_offset_bytes + FlatGroupBytes(g.group.shape));
  }
  return (end + kGroupAlignmentBytes - 1) / kGroupAlignmentBytes * kGroupAlignmentBytes;
}

Status CopyPlan::Build(const std::vector<kernels::ChunkCopy>& chunks,
                       const std::vector<uint8_t*>& flats) {
  uint64_t ids = 0;
  for (const kernels::ChunkCopy& c : chunks) ids += c.num_block_ids;
  // Entries first (8-byte aligned), block ids after them.
  const uint64_t bytes = chunks.size() * sizeof(kernels::ChunkCopy) + ids * sizeof(uint32_t);
  if (bytes > arena_.size()) {
    const uint64_t size = std::max({bytes, 2 * uint64_t(arena_.size()), kMinArenaBytes});
    arena_ = cuda::PinnedHostBuffer();  // free the old arena before taking a larger one
    Result<cuda::PinnedHostBuffer> grown = cuda::PinnedHostBuffer::Allocate(size);
    if (!grown.ok()) return grown.status();
    arena_ = std::move(*grown);
  }
  auto* entries = reinterpret_cast<kernels::ChunkCopy*>(arena_.host());
  const uint64_t ids_offset = chunks.size() * sizeof(kernels::ChunkCopy);
  auto* host_ids = reinterpret_cast<uint32_t*>(arena_.host() + ids_offset);
  auto* device_ids = reinterpret_cast<const uint32_t*>(arena_.device() + ids_offset);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const kernels::ChunkCopy& c = chunks[i];
    std::memcpy(host_ids, c.block_ids, c.num_block_ids * sizeof(uint32_t));
    entries[i] = kernels::ChunkCopy{flats[i], device_ids, c.num_block_ids, c.num_tokens, c.skip_tokens};
    host_ids += c.num_block_ids;
    device_ids += c.num_block_ids;
  }
  return Status::Ok();
}

kernels::DeviceChunkBatch CopyPlan::Slice(size_t begin, size_t count) const {
  const auto* host = reinterpret_cast<const kernels::ChunkCopy*>(arena_.host());
  const auto* device = reinterpret_cast<const kernels::ChunkCopy*>(arena_.device());
  return kernels::DeviceChunkBatch{host + begin, device + begin, count};
}

}  // namespace kvstash::server
