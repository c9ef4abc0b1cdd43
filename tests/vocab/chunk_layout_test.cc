// Grouping layers by geometry and placing groups inside the flat chunk.
#include "kvstash/chunk_layout.h"

#include <gtest/gtest.h>

namespace kvstash {
namespace {

LayerGeometry Mha(uint32_t heads, uint32_t head_bytes, DType dtype, uint32_t blocks = 128) {
  const uint64_t token = uint64_t(heads) * head_bytes, block = 16 * token;
  return LayerGeometry{blocks,         2,     16,         heads, head_bytes, block,
                       blocks * block, token, head_bytes, dtype};
}
LayerGeometry Mla(uint32_t entry_bytes, DType dtype) {
  return LayerGeometry{128, 1, 16, 1, entry_bytes, 16ull * entry_bytes, 0, entry_bytes, 0, dtype};
}

TEST(ChunkLayout, GroupsIdenticalLayersOnce) {
  std::vector<LayerGeometry> layers(32, Mha(8, 256, DType::kBF16));
  auto layout = ChunkLayout::Build(layers, 256);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->groups().size(), 1u);
  EXPECT_EQ(layout->groups()[0].layers.size(), 32u);
  // Llama-3-8B: 32 layers x 2 x 256 tokens x 8 heads x 256 bytes = 32 MiB.
  EXPECT_EQ(layout->chunk_bytes(), 32ull << 20);
  EXPECT_EQ(layout->blocks_per_chunk(), 16u);
}

TEST(ChunkLayout, HybridMhaAndMlaMakeTwoAlignedGroups) {
  // Alternating MHA (int8, 132-byte heads) and MLA (FP8, 656-byte entries).
  std::vector<LayerGeometry> layers;
  for (int i = 0; i < 6; ++i) {
    layers.push_back(i % 2 ? Mla(656, DType::kF8E4M3) : Mha(4, 132, DType::kI8));
  }
  auto layout = ChunkLayout::Build(layers, 32);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->groups().size(), 2u);
  const ChunkGroup& mha = layout->groups()[0];
  const ChunkGroup& mla = layout->groups()[1];
  EXPECT_EQ(mha.layers, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(mla.layers, (std::vector<uint32_t>{1, 3, 5}));
  EXPECT_EQ(mha.offset_bytes, 0u);
  EXPECT_EQ(mha.size_bytes(), 3ull * 2 * 32 * 4 * 132);
  // The second group starts at the next 256-byte boundary.
  EXPECT_EQ(mla.offset_bytes, (mha.size_bytes() + 255) / 256 * 256);
  EXPECT_EQ(mla.offset_bytes % kGroupAlignmentBytes, 0u);
  EXPECT_EQ(mla.size_bytes(), 3ull * 1 * 32 * 656);
  EXPECT_EQ(layout->chunk_bytes() % kGroupAlignmentBytes, 0u);
  EXPECT_GE(layout->chunk_bytes(), mla.offset_bytes + mla.size_bytes());
}

TEST(ChunkLayout, FlatOffsetIsLayerKvTokenHead) {
  FlatGroupShape s{3, 2, 32, 4, 132};
  EXPECT_EQ(FlatOffset(s, 0, 0, 0, 1), 132u);
  EXPECT_EQ(FlatOffset(s, 0, 0, 1, 0), 4u * 132);
  EXPECT_EQ(FlatOffset(s, 0, 1, 0, 0), 32u * 4 * 132);
  EXPECT_EQ(FlatOffset(s, 1, 0, 0, 0), 2u * 32 * 4 * 132);
  EXPECT_EQ(FlatGroupBytes(s), FlatOffset(s, 3, 0, 0, 0));
}

TEST(ChunkLayout, RejectsMixedBlockSizesAndBadChunkTokens) {
  std::vector<LayerGeometry> layers = {Mha(8, 256, DType::kBF16), Mha(8, 256, DType::kBF16)};
  layers[1].block_tokens = 32;
  layers[1].block_stride *= 2;
  layers[1].kv_stride *= 2;
  EXPECT_EQ(ChunkLayout::Build(layers, 256).status().code(), StatusCode::kInvalidArgument);
  layers = {Mha(8, 256, DType::kBF16)};
  EXPECT_FALSE(ChunkLayout::Build(layers, 100).ok());  // not a multiple of 16
  EXPECT_FALSE(ChunkLayout::Build({}, 256).ok());
}

TEST(ChunkLayout, FingerprintIgnoresPoolSizeButNotShape) {
  auto a = ChunkLayout::Build({Mha(8, 256, DType::kBF16, 128)}, 256);
  auto b = ChunkLayout::Build({Mha(8, 256, DType::kBF16, 4096)}, 256);
  auto c = ChunkLayout::Build({Mha(8, 256, DType::kF16, 128)}, 256);
  auto d = ChunkLayout::Build({Mha(8, 256, DType::kBF16, 128)}, 512);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  EXPECT_NE(a->fingerprint(), d->fingerprint());
}

}  // namespace
}  // namespace kvstash
