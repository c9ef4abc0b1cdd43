// Grouping layers by geometry and placing the groups inside the flat chunk.
#include "kvstash/chunk_layout.h"

#include <string>

#include "kvstash/geometry_check.h"
#include "sha256.h"

namespace kvstash {

namespace {

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

Fingerprint ComputeFingerprint(uint32_t chunk_tokens, const std::vector<ChunkGroup>& groups) {
  internal::Sha256 h;
  h.Update(std::string_view("kvstash-layout-v1"));
  h.UpdateU32(chunk_tokens);
  h.UpdateU32(uint32_t(groups.size()));
  for (const ChunkGroup& group : groups) {
    const LayerGeometry& g = group.geometry;
    // num_blocks and strides describe the engine's memory, not the chunk:
    // two engines with different pool sizes still share chunks.
    h.UpdateU32(g.kv_count);
    h.UpdateU32(g.num_heads);
    h.UpdateU32(g.head_bytes);
    h.UpdateU32(uint32_t(g.dtype));
    h.UpdateU32(uint32_t(group.layers.size()));
    for (uint32_t layer : group.layers) h.UpdateU32(layer);
  }
  return h.Finish();
}

}  // namespace

Result<ChunkLayout> ChunkLayout::Build(const std::vector<LayerGeometry>& layers,
                                       uint32_t chunk_tokens) {
  if (layers.empty()) return Status::InvalidArgument("a registration needs at least one layer");
  ChunkLayout layout;
  layout.chunk_tokens_ = chunk_tokens;
  layout.block_tokens_ = layers[0].block_tokens;
  layout.num_layers_ = uint32_t(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerGeometry& g = layers[i];
    Status valid = ValidateGeometry(g);
    if (!valid.ok()) {
      return Status(valid.code(), "layer " + std::to_string(i) + ": " + valid.message());
    }
    if (g.block_tokens != layout.block_tokens_) {
      return Status::InvalidArgument("layer " + std::to_string(i) + " has block_tokens " +
                                     std::to_string(g.block_tokens) + " but layer 0 has " +
                                     std::to_string(layout.block_tokens_) +
                                     ": one registration shares one block table");
    }
    ChunkGroup* group = nullptr;
    for (ChunkGroup& existing : layout.groups_) {
      if (SameGroupGeometry(existing.geometry, g)) group = &existing;
    }
    if (group == nullptr) {
      layout.groups_.push_back(ChunkGroup{g, {}, 0, {}});
      group = &layout.groups_.back();
    }
    group->layers.push_back(uint32_t(i));
  }
  if (chunk_tokens == 0 || chunk_tokens % layout.block_tokens_ != 0) {
    return Status::InvalidArgument("chunk_tokens " + std::to_string(chunk_tokens) +
                                   " must be a positive multiple of block_tokens " +
                                   std::to_string(layout.block_tokens_));
  }
  uint64_t offset = 0;
  for (ChunkGroup& group : layout.groups_) {
    const LayerGeometry& g = group.geometry;
    group.shape = FlatGroupShape{uint32_t(group.layers.size()), g.kv_count, chunk_tokens,
                                 g.num_heads, g.head_bytes};
    offset = AlignUp(offset, kGroupAlignmentBytes);
    group.offset_bytes = offset;
    offset += group.size_bytes();
  }
  layout.chunk_bytes_ = AlignUp(offset, kGroupAlignmentBytes);
  layout.fingerprint_ = ComputeFingerprint(chunk_tokens, layout.groups_);
  return layout;
}

}  // namespace kvstash
