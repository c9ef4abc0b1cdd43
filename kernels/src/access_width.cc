#include "kvstash/kernels/access_width.h"

#include <cstdint>

#include "merged_heads.h"

namespace kvstash::kernels {

uint32_t AccessWidthBytes(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks) {
  const GroupCopy merged = internal::MergeContiguousHeads(group);
  const LayerGeometry& g = merged.geometry;
  // A power of two divides every value iff it divides their bitwise OR, so the
  // lowest set bit of the OR is the alignment they all share.
  uint64_t bits = kMaxAccessWidthBytes | g.head_bytes | merged.flat_offset_bytes;
  // A stride matters only if the copy ever steps by it.
  if (g.num_blocks != 1) bits |= g.block_stride;
  if (g.kv_count > 1) bits |= g.kv_stride;
  if (g.block_tokens > 1) bits |= g.token_stride;
  if (g.num_heads > 1) bits |= g.head_stride;
  for (uint32_t layer = 0; layer < merged.shape.num_layers; ++layer) {
    bits |= reinterpret_cast<uintptr_t>(merged.layer_bases[layer]);
  }
  for (size_t i = 0; i < num_chunks; ++i) bits |= reinterpret_cast<uintptr_t>(chunks[i].flat);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

}  // namespace kvstash::kernels
