// Gather (paged engine blocks -> flat chunk) and scatter (flat chunk -> paged
// engine blocks) for one batch of chunks and one group of layers. This header
// has no CUDA types: the CPU twins run in the host backend and in tests, and
// the CUDA launchers (chunk_copy_cuda.h) take the same descriptions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/chunk_layout.h"
#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash::kernels {

// One group of layers in one address space (host memory for the CPU twins,
// device memory for the CUDA kernels).
struct GroupCopy {
  LayerGeometry geometry;       // shared by every layer of the group
  FlatGroupShape shape;         // the group inside the flat chunk
  uint64_t flat_offset_bytes;   // group offset inside the flat chunk
  uint8_t* const* layer_bases;  // [shape.num_layers] engine layer base addresses
};

// One chunk of the batch.
struct ChunkCopy {
  uint8_t* flat;              // chunk buffer of layout.chunk_bytes()
  const uint32_t* block_ids;  // [num_block_ids] engine blocks, token t of the
                              // chunk lives in block_ids[t / block_tokens]
  uint32_t num_block_ids;     // >= ceil(num_tokens / block_tokens)
  uint32_t num_tokens;        // valid tokens in the chunk (<= chunk_tokens)
  uint32_t skip_tokens;       // scatter only: leading tokens not written
};

// Copies tokens [0, num_tokens) of every chunk from the paged layers into the
// flat buffer and writes zeros over tokens [num_tokens, chunk_tokens) of every
// (layer, kv) row, so a partial chunk never carries stale bytes. Block ids must
// already be checked against geometry.num_blocks by the caller.
Status GatherChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);

// Copies tokens [skip_tokens, num_tokens) of every chunk from the flat buffer
// into the paged layers. Never writes a token outside that range, nor a block
// not named in block_ids.
Status ScatterChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);

}  // namespace kvstash::kernels
