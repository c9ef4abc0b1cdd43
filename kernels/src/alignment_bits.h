// The alignment a copy's addresses share, split by how long each part
// lives: the group's (head bytes, strides, layer bases), known once its
// layers are, and each batch's (flat offset and chunk buffers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/kernels/chunk_copy.h"

namespace kvstash::kernels::internal {

// OR of head_bytes, every stride a copy of `merged` steps by and every layer
// base (not its flat offset), with kMaxAccessWidthBytes set. `merged`: heads
// already merged (MergeContiguousHeads).
uint64_t GroupAlignmentBits(const GroupCopy& merged);

// The widest access (16, 8, 4, 2, 1 bytes) that `bits` and every chunk's
// flat pointer allow.
uint32_t AccessWidthOf(uint64_t bits, const ChunkCopy* chunks, size_t num_chunks);

}  // namespace kvstash::kernels::internal
