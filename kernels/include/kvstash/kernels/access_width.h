// The access width of a copy: the widest of 16, 8, 4, 2, 1 bytes that every
// address of a batch is aligned to (FlashInfer's DISPATCH_ALIGNED_VEC_SIZE).
// Plain C++, so the host backend, `describe` and tests see the width that the
// CUDA kernels will use without needing CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/kernels/chunk_copy.h"

namespace kvstash::kernels {

inline constexpr uint32_t kMaxAccessWidthBytes = 16;

// The largest power of two up to 16 dividing head_bytes, every stride that a
// copy steps by, every layer base, the group's flat offset and every chunk's
// flat pointer. Heads packed back to back count as one wider head first, so
// eight packed 132-byte heads allow 16 where one alone allows 4.
// `group.layer_bases` and `chunks` must be readable here; their addresses may
// be device addresses (only their values are looked at).
uint32_t AccessWidthBytes(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);

}  // namespace kvstash::kernels
