// Engine KV layouts the kernel tests run on, described with the strides each
// engine really uses, and the test data around them: where a group's layers
// sit in one buffer, random payload bytes, random block ids.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kvstash/chunk_layout.h"
#include "kvstash/geometry.h"
#include "kvstash/kernels/chunk_copy.h"

namespace kvstash::kernels::test {

// Untouched bytes. Payload bytes are never this (nor zero), so every byte a
// copy writes shows, and so does every byte it should not have written.
inline constexpr uint8_t kPoison = 0xCD;
// The group sits behind another group in the flat chunk, as in hybrid models.
inline constexpr uint64_t kFlatOffsetBytes = 256;
// Poisoned bytes after the group inside each flat buffer, and between layers.
inline constexpr uint64_t kGuardBytes = 256;

struct TestLayout {
  std::string name;
  LayerGeometry geometry;
  uint32_t num_layers = 3;
  uint32_t chunk_tokens = 0;
  uint32_t access_width = 0;  // what AccessWidthBytes picks with aligned buffers

  uint32_t blocks_per_chunk() const { return chunk_tokens / geometry.block_tokens; }
  FlatGroupShape shape() const {
    return {num_layers, geometry.kv_count, chunk_tokens, geometry.num_heads, geometry.head_bytes};
  }
  uint64_t flat_bytes() const { return kFlatOffsetBytes + FlatGroupBytes(shape()) + kGuardBytes; }
  // Layers one after another in one buffer, 256-aligned, poisoned gaps between.
  uint64_t layer_offset(uint32_t layer) const {
    const uint64_t stride = (LayerExtentBytes(geometry) + kGuardBytes + 255) / 256 * 256;
    return layer * stride;
  }
  uint64_t arena_bytes() const { return layer_offset(num_layers); }
};

// Test names already say the layout; keep gtest from dumping its bytes.
inline void PrintTo(const TestLayout& l, std::ostream* os) { *os << l.name; }

// Layers hold 3 chunks' worth of blocks and 2 more, so that tests can name
// disjoint blocks and leave some unnamed.
inline LayerGeometry Geometry(uint32_t kv_count, uint32_t block_tokens, uint32_t num_heads,
                              uint32_t head_bytes, uint32_t chunk_tokens, DType dtype) {
  LayerGeometry g;
  g.num_blocks = 3 * (chunk_tokens / block_tokens) + 2;
  g.kv_count = kv_count;
  g.block_tokens = block_tokens;
  g.num_heads = num_heads;
  g.head_bytes = head_bytes;
  g.dtype = dtype;
  return g;
}

// vLLM flash-attn NHD [2, num_blocks, block_tokens, num_heads, head_bytes].
inline LayerGeometry KvFirstNhd(LayerGeometry g, uint64_t block_padding = 0) {
  g.head_stride = g.head_bytes;
  g.token_stride = uint64_t{g.num_heads} * g.head_bytes;
  g.block_stride = g.block_tokens * g.token_stride + block_padding;
  g.kv_stride = g.num_blocks * g.block_stride;
  return g;
}

// vLLM HND [2, num_blocks, num_heads, block_tokens, head_bytes].
inline LayerGeometry KvFirstHnd(LayerGeometry g) {
  g.token_stride = g.head_bytes;
  g.head_stride = uint64_t{g.block_tokens} * g.head_bytes;
  g.block_stride = g.num_heads * g.head_stride;
  g.kv_stride = g.num_blocks * g.block_stride;
  return g;
}

// FlashInfer NHD [num_blocks, 2, block_tokens, num_heads, head_bytes].
inline LayerGeometry BlockFirstNhd(LayerGeometry g) {
  g.head_stride = g.head_bytes;
  g.token_stride = uint64_t{g.num_heads} * g.head_bytes;
  g.kv_stride = g.block_tokens * g.token_stride;
  g.block_stride = g.kv_count * g.kv_stride;
  return g;
}

inline std::vector<TestLayout> AllLayouts() {
  auto layout = [](std::string name, LayerGeometry g, uint32_t chunk_tokens, uint32_t width) {
    TestLayout l;
    l.name = std::move(name);
    l.geometry = g;
    l.chunk_tokens = chunk_tokens;
    l.access_width = width;
    return l;
  };
  return {
      // 8 KV heads x 128 bf16, block 16: Llama-3-8B under vLLM.
      layout("VllmFlashNhdBf16", KvFirstNhd(Geometry(2, 16, 8, 256, 64, DType::kBF16)), 64, 16),
      layout("VllmHndBf16", KvFirstHnd(Geometry(2, 16, 8, 256, 64, DType::kBF16)), 64, 16),
      layout("FlashInferNhdBf16", BlockFirstNhd(Geometry(2, 16, 8, 256, 64, DType::kBF16)), 64, 16),
      // MLA latent: 512 + 64 rope bf16 elements per token, one "head".
      layout("MlaBf16", KvFirstNhd(Geometry(1, 16, 1, 1152, 64, DType::kBF16)), 64, 16),
      // DeepSeek FP8 MLA entries: 512 fp8 + 4 fp32 scales + 64 bf16 rope = 656 B, block 64.
      layout("MlaFp8Entries656", KvFirstNhd(Geometry(1, 64, 1, 656, 128, DType::kU8)), 128, 16),
      // int8 heads of 128 values + a 4-byte scale: packed heads merge to 16-byte runs...
      layout("Int8Heads132Nhd", KvFirstNhd(Geometry(2, 16, 8, 132, 64, DType::kI8)), 64, 16),
      // ...strided ones allow only 4-byte accesses.
      layout("Int8Heads132Hnd", KvFirstHnd(Geometry(2, 16, 4, 132, 64, DType::kI8)), 64, 4),
      // Blocks padded past their packed size (hybrid models share one page size).
      layout("PaddedBlocksBf16", KvFirstNhd(Geometry(2, 16, 4, 128, 64, DType::kBF16), 8), 64, 8),
      // SGLang token pool: one token per block.
      layout("SglangTokenPoolBf16", KvFirstNhd(Geometry(2, 1, 8, 256, 32, DType::kBF16)), 32, 16),
      // Narrow heads reach the 2- and 1-byte paths.
      layout("NarrowF16HeadsHnd", KvFirstHnd(Geometry(2, 4, 3, 6, 16, DType::kF16)), 16, 2),
      layout("OddU8HeadsNhd", KvFirstNhd(Geometry(2, 4, 3, 7, 16, DType::kU8)), 16, 1),
  };
}

// Random bytes that are never 0 nor kPoison.
inline std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(1, 254);
  std::vector<uint8_t> out(size);
  for (uint8_t& b : out) {
    b = static_cast<uint8_t>(byte(rng));
    if (b == kPoison) b = 0xFF;
  }
  return out;
}

// `count` distinct block ids out of [0, num_blocks), in random order.
inline std::vector<uint32_t> RandomBlocks(uint32_t num_blocks, uint32_t count, uint32_t seed) {
  std::vector<uint32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  ids.resize(count);
  return ids;
}

// One chunk of a test batch, before its flat buffer is known.
struct ChunkSpec {
  std::vector<uint32_t> block_ids;
  uint32_t num_tokens = 0;
  uint32_t skip_tokens = 0;  // scatter only
};

// Three chunks on disjoint blocks: a full one; a partial one, not ending on a
// block boundary, with exactly enough block ids, whose skip reaches into its
// second block; and one whose skip passes its end (a scatter writes nothing).
inline std::vector<ChunkSpec> MixedBatch(const TestLayout& l, uint32_t seed) {
  const uint32_t bt = l.geometry.block_tokens;
  const uint32_t per_chunk = l.blocks_per_chunk();
  const std::vector<uint32_t> blocks = RandomBlocks(l.geometry.num_blocks, 3 * per_chunk, seed);
  auto blocks_of = [&](uint32_t chunk, uint32_t num_tokens) {
    auto first = blocks.begin() + chunk * per_chunk;
    return std::vector<uint32_t>(first, first + (num_tokens + bt - 1) / bt);
  };
  const uint32_t partial = l.chunk_tokens - bt - 3;
  const uint32_t half = l.chunk_tokens / 2 + 1;
  return {{blocks_of(0, l.chunk_tokens), l.chunk_tokens, 0},
          {blocks_of(1, partial), partial, std::min(bt + 1, partial / 2)},
          {blocks_of(2, half), half, l.chunk_tokens}};
}

inline std::vector<ChunkCopy> MakeChunkCopies(const std::vector<ChunkSpec>& specs,
                                              const std::vector<uint8_t*>& flats) {
  std::vector<ChunkCopy> chunks;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ChunkSpec& s = specs[i];
    chunks.push_back({flats[i], s.block_ids.data(), static_cast<uint32_t>(s.block_ids.size()),
                      s.num_tokens, s.skip_tokens});
  }
  return chunks;
}

// Bases of the layers of `l` inside `arena` (see TestLayout::layer_offset).
inline std::vector<uint8_t*> LayerBases(const TestLayout& l, uint8_t* arena) {
  std::vector<uint8_t*> bases;
  for (uint32_t layer = 0; layer < l.num_layers; ++layer)
    bases.push_back(arena + l.layer_offset(layer));
  return bases;
}

inline GroupCopy MakeGroup(const TestLayout& l, const std::vector<uint8_t*>& bases) {
  return {l.geometry, l.shape(), kFlatOffsetBytes, bases.data()};
}

// Payload bytes a scatter of `spec` writes.
inline uint64_t ScatteredBytes(const TestLayout& l, const ChunkSpec& spec) {
  const uint64_t tokens =
      spec.num_tokens > spec.skip_tokens ? spec.num_tokens - spec.skip_tokens : 0;
  return tokens * l.num_layers * l.geometry.kv_count * l.geometry.num_heads * l.geometry.head_bytes;
}

}  // namespace kvstash::kernels::test
