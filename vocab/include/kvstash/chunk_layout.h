// The chunk format (docs/protocol.md "Chunk format"): one flat buffer per chunk,
// groups one after another at 256-byte aligned offsets, each group laid out
// [layer][kv][token][head][head_bytes].
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kvstash/geometry.h"
#include "kvstash/host_device.h"
#include "kvstash/status.h"

namespace kvstash {

inline constexpr uint64_t kGroupAlignmentBytes = 256;

// Shape of one group inside the flat chunk; POD so kernels can take it.
struct FlatGroupShape {
  uint32_t num_layers = 0;
  uint32_t kv_count = 0;
  uint32_t chunk_tokens = 0;
  uint32_t num_heads = 0;
  uint32_t head_bytes = 0;
};

KVSTASH_HOST_DEVICE uint64_t FlatOffset(const FlatGroupShape& s, uint64_t layer, uint64_t kv,
                                        uint64_t token, uint64_t head) {
  return (((layer * s.kv_count + kv) * s.chunk_tokens + token) * s.num_heads + head) * s.head_bytes;
}

KVSTASH_HOST_DEVICE uint64_t FlatGroupBytes(const FlatGroupShape& s) {
  return uint64_t{s.num_layers} * s.kv_count * s.chunk_tokens * s.num_heads * s.head_bytes;
}

// One layer of the group: a group's layers lie one after another.
KVSTASH_HOST_DEVICE uint64_t FlatLayerBytes(const FlatGroupShape& s) {
  return uint64_t{s.kv_count} * s.chunk_tokens * s.num_heads * s.head_bytes;
}

struct ChunkGroup {
  LayerGeometry geometry;        // shared by every layer of the group
  std::vector<uint32_t> layers;  // indices into the registration's layers
  uint64_t offset_bytes = 0;     // inside the flat chunk
  FlatGroupShape shape;
  uint64_t size_bytes() const { return FlatGroupBytes(shape); }
};

using Fingerprint = std::array<uint8_t, 32>;

// Immutable once built; safe to share between threads.
class ChunkLayout {
 public:
  // Groups layers by geometry (first appearance order). All layers must share
  // block_tokens, and chunk_tokens must be a multiple of it.
  static Result<ChunkLayout> Build(const std::vector<LayerGeometry>& layers, uint32_t chunk_tokens);

  uint32_t chunk_tokens() const { return chunk_tokens_; }
  uint32_t block_tokens() const { return block_tokens_; }
  uint32_t blocks_per_chunk() const { return chunk_tokens_ / block_tokens_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint32_t num_layers() const { return num_layers_; }
  const std::vector<ChunkGroup>& groups() const { return groups_; }
  // SHA-256 over chunk_tokens and every group's geometry, dtype and layers.
  const Fingerprint& fingerprint() const { return fingerprint_; }

 private:
  uint32_t chunk_tokens_ = 0;
  uint32_t block_tokens_ = 0;
  uint32_t num_layers_ = 0;
  uint64_t chunk_bytes_ = 0;
  std::vector<ChunkGroup> groups_;
  Fingerprint fingerprint_{};
};

}  // namespace kvstash
