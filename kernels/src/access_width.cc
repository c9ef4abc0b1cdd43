#include "kvstash/kernels/access_width.h"

#include <cstdint>

#include "alignment_bits.h"
#include "merged_heads.h"

namespace kvstash::kernels {

namespace internal {

uint64_t GroupAlignmentBits(const GroupCopy& merged) {
  const LayerGeometry& g = merged.geometry;
  uint64_t bits = kMaxAccessWidthBytes | g.head_bytes;
  // A stride matters only if the copy ever steps by it.
  if (g.num_blocks != 1) bits |= g.block_stride;
  if (g.kv_count > 1) bits |= g.kv_stride;
  if (g.block_tokens > 1) bits |= g.token_stride;
  if (g.num_heads > 1) bits |= g.head_stride;
  for (uint32_t layer = 0; layer < merged.shape.num_layers; ++layer) {
    bits |= reinterpret_cast<uintptr_t>(merged.layer_bases[layer]);
  }
  return bits;
}

uint32_t AccessWidthOf(uint64_t bits, const ChunkCopy* chunks, size_t num_chunks) {
  for (size_t i = 0; i < num_chunks; ++i) bits |= reinterpret_cast<uintptr_t>(chunks[i].flat);
  // A power of two divides every value iff it divides their bitwise OR, so the
  // lowest set bit of the OR is the alignment they all share.
  return static_cast<uint32_t>(bits & (~bits + 1));
}

}  // namespace internal

uint32_t AccessWidthBytes(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks) {
  const GroupCopy merged = internal::MergeContiguousHeads(group);
  return internal::AccessWidthOf(internal::GroupAlignmentBits(merged) | merged.flat_offset_bytes,
                                 chunks, num_chunks);
}

}  // namespace kvstash::kernels
