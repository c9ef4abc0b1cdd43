// Heads that lie back to back in the paged layer are, for copying, one wider
// head. The CPU twins and the CUDA kernels both walk this merged view: runs get
// longer and the access width can grow (eight packed 132-byte int8 heads are
// one 1056-byte run, 16-byte aligned, where a single head allows only 4).
#pragma once

#include <cstdint>

#include "kvstash/kernels/chunk_copy.h"

namespace kvstash::kernels::internal {

// Every (token, head 0) keeps its PagedOffset and FlatOffset, so the merged
// group addresses exactly the same bytes.
inline GroupCopy MergeContiguousHeads(GroupCopy group) {
  LayerGeometry& g = group.geometry;
  const uint64_t token_bytes = uint64_t{g.num_heads} * g.head_bytes;
  if (g.num_heads > 1 && g.head_stride == g.head_bytes && token_bytes <= UINT32_MAX) {
    g.num_heads = 1;
    g.head_bytes = static_cast<uint32_t>(token_bytes);
    g.head_stride = token_bytes;
    group.shape.num_heads = 1;
    group.shape.head_bytes = g.head_bytes;
  }
  return group;
}

}  // namespace kvstash::kernels::internal
