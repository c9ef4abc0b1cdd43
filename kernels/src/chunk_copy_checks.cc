#include "chunk_copy_checks.h"

#include <string>

namespace kvstash::kernels::internal {

namespace {

std::string Str(uint64_t value) { return std::to_string(value); }

}  // namespace

Status CheckGroup(const GroupCopy& group) {
  const LayerGeometry& g = group.geometry;
  const FlatGroupShape& s = group.shape;
  if (g.kv_count == 0 || g.block_tokens == 0 || g.num_heads == 0 || g.head_bytes == 0 ||
      s.num_layers == 0 || s.chunk_tokens == 0) {
    return Status::InvalidArgument("group counts must be positive: kv_count " + Str(g.kv_count) +
                                   ", block_tokens " + Str(g.block_tokens) + ", num_heads " +
                                   Str(g.num_heads) + ", head_bytes " + Str(g.head_bytes) +
                                   ", num_layers " + Str(s.num_layers) + ", chunk_tokens " +
                                   Str(s.chunk_tokens));
  }
  if (s.kv_count != g.kv_count || s.num_heads != g.num_heads || s.head_bytes != g.head_bytes) {
    return Status::InvalidArgument("flat shape (kv_count " + Str(s.kv_count) + ", num_heads " +
                                   Str(s.num_heads) + ", head_bytes " + Str(s.head_bytes) +
                                   ") does not match the layer geometry (" + Str(g.kv_count) +
                                   ", " + Str(g.num_heads) + ", " + Str(g.head_bytes) + ")");
  }
  if (group.layer_bases == nullptr) return Status::InvalidArgument("layer_bases is null");
  for (uint32_t layer = 0; layer < s.num_layers; ++layer) {
    if (group.layer_bases[layer] == nullptr) {
      return Status::InvalidArgument("base of layer " + Str(layer) + " of the group is null");
    }
  }
  return Status::Ok();
}

Status CheckChunks(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks) {
  if (num_chunks > 0 && chunks == nullptr) return Status::InvalidArgument("chunks is null");
  const uint32_t block_tokens = group.geometry.block_tokens;
  for (size_t i = 0; i < num_chunks; ++i) {
    const ChunkCopy& c = chunks[i];
    if (c.flat == nullptr) return Status::InvalidArgument("chunk " + Str(i) + ": flat is null");
    if (c.num_tokens > group.shape.chunk_tokens) {
      return Status::InvalidArgument("chunk " + Str(i) + ": num_tokens " + Str(c.num_tokens) +
                                     " exceeds chunk_tokens " + Str(group.shape.chunk_tokens));
    }
    const uint64_t needed = (uint64_t{c.num_tokens} + block_tokens - 1) / block_tokens;
    if (c.num_block_ids < needed) {
      return Status::InvalidArgument(
          "chunk " + Str(i) + ": " + Str(c.num_block_ids) + " block ids for " + Str(c.num_tokens) +
          " tokens of block_tokens " + Str(block_tokens) + ", need " + Str(needed));
    }
    if (needed > 0 && c.block_ids == nullptr) {
      return Status::InvalidArgument("chunk " + Str(i) + ": block_ids is null");
    }
  }
  return Status::Ok();
}

}  // namespace kvstash::kernels::internal
