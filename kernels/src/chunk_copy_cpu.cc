// CPU twins of the gather/scatter kernels. They also run on the host
// backend's hot path, so each (layer, kv) row is copied in the longest runs
// the geometry allows: a block's worth of tokens in one memcpy when tokens are
// packed, else one memcpy per token (heads merged) or per head. The group is
// checked and its heads merged once (PrepareGroupCpu), so that a copy of a
// few chunks and one layer, the host backend's task, checks only its chunks.
// A call touches only its own chunks' bytes, so callers may split a batch
// across threads.
#include <algorithm>
#include <cstring>

#include "chunk_copy_checks.h"
#include "kvstash/kernels/chunk_copy.h"
#include "merged_heads.h"
#include "row_run_copy.h"

namespace kvstash::kernels {

namespace {

enum class Direction { kGather, kScatter };

template <Direction kDir>
void Move(uint8_t* paged, uint8_t* flat, size_t bytes) {
  if constexpr (kDir == Direction::kGather) {
    internal::CopyRun(flat, paged, bytes);
  } else {
    internal::CopyRun(paged, flat, bytes);
  }
}

// Copies tokens [begin, end) of one (layer, kv) row of `chunk`. `group` is the
// merged view (MergeContiguousHeads).
template <Direction kDir>
void CopyRow(const GroupCopy& group, const ChunkCopy& chunk, uint32_t layer, uint32_t kv,
             uint32_t begin, uint32_t end) {
  const LayerGeometry& g = group.geometry;
  const FlatGroupShape& s = group.shape;
  const uint64_t token_bytes = uint64_t{s.num_heads} * s.head_bytes;
  const bool packed_tokens = g.num_heads == 1 && g.token_stride == g.head_bytes;
  uint8_t* const base = group.layer_bases[layer];
  uint8_t* const flat = chunk.flat + group.flat_offset_bytes;
  for (uint32_t t = begin; t < end;) {
    const uint32_t block = chunk.block_ids[t / g.block_tokens];
    const uint32_t in_block = t % g.block_tokens;
    const uint32_t run = std::min(end - t, g.block_tokens - in_block);
    if (packed_tokens) {
      Move<kDir>(base + PagedOffset(g, block, kv, in_block, 0),
                 flat + FlatOffset(s, layer, kv, t, 0), run * token_bytes);
    } else {
      for (uint32_t i = 0; i < run; ++i) {
        for (uint32_t h = 0; h < g.num_heads; ++h) {
          Move<kDir>(base + PagedOffset(g, block, kv, in_block + i, h),
                     flat + FlatOffset(s, layer, kv, t + i, h), s.head_bytes);
        }
      }
    }
    t += run;
  }
}

}  // namespace

Result<PreparedCpuGroup> PrepareGroupCpu(const GroupCopy& group) {
  KVSTASH_RETURN_IF_ERROR(internal::CheckGroup(group));
  return PreparedCpuGroup(internal::MergeContiguousHeads(group));
}

Status GatherChunksCpu(const PreparedCpuGroup& prepared, const ChunkCopy* chunks,
                       size_t num_chunks) {
  const GroupCopy& merged = prepared.group();
  KVSTASH_RETURN_IF_ERROR(internal::CheckChunks(merged, chunks, num_chunks));
  const FlatGroupShape& s = merged.shape;
  const uint64_t token_bytes = uint64_t{s.num_heads} * s.head_bytes;
  for (size_t c = 0; c < num_chunks; ++c) {
    const ChunkCopy& chunk = chunks[c];
    for (uint32_t layer = 0; layer < s.num_layers; ++layer) {
      for (uint32_t kv = 0; kv < s.kv_count; ++kv) {
        CopyRow<Direction::kGather>(merged, chunk, layer, kv, 0, chunk.num_tokens);
        std::memset(
            chunk.flat + merged.flat_offset_bytes + FlatOffset(s, layer, kv, chunk.num_tokens, 0),
            0, (s.chunk_tokens - chunk.num_tokens) * token_bytes);
      }
    }
  }
  return Status::Ok();
}

Status ScatterChunksCpu(const PreparedCpuGroup& prepared, const ChunkCopy* chunks,
                        size_t num_chunks) {
  const GroupCopy& merged = prepared.group();
  KVSTASH_RETURN_IF_ERROR(internal::CheckChunks(merged, chunks, num_chunks));
  for (size_t c = 0; c < num_chunks; ++c) {
    const ChunkCopy& chunk = chunks[c];
    if (chunk.skip_tokens >= chunk.num_tokens) continue;
    for (uint32_t layer = 0; layer < merged.shape.num_layers; ++layer) {
      for (uint32_t kv = 0; kv < merged.shape.kv_count; ++kv) {
        CopyRow<Direction::kScatter>(merged, chunk, layer, kv, chunk.skip_tokens, chunk.num_tokens);
      }
    }
  }
  return Status::Ok();
}

Status GatherChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks) {
  Result<PreparedCpuGroup> prepared = PrepareGroupCpu(group);
  if (!prepared.ok()) return prepared.status();
  return GatherChunksCpu(*prepared, chunks, num_chunks);
}

Status ScatterChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks) {
  Result<PreparedCpuGroup> prepared = PrepareGroupCpu(group);
  if (!prepared.ok()) return prepared.status();
  return ScatterChunksCpu(*prepared, chunks, num_chunks);
}

}  // namespace kvstash::kernels
