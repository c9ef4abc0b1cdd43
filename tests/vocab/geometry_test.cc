// Geometry validation and the shared address arithmetic.
#include "kvstash/geometry.h"

#include <gtest/gtest.h>

#include "kvstash/geometry_check.h"

namespace kvstash {
namespace {

// vLLM flash-attn NHD [2, nb, bs, h, d] bf16, one layer.
LayerGeometry FlashAttnNhd(uint32_t blocks = 64) {
  const uint64_t head = 128 * 2, token = 8 * head, block = 16 * token;
  return LayerGeometry{blocks, 2, 16, 8, 256, block, blocks * block, token, head, DType::kBF16};
}

TEST(Geometry, PagedOffsetFollowsStrides) {
  const LayerGeometry g = FlashAttnNhd();
  EXPECT_EQ(PagedOffset(g, 3, 1, 5, 7),
            3 * g.block_stride + g.kv_stride + 5 * g.token_stride + 7 * 256);
  EXPECT_EQ(LayerExtentBytes(g), 2 * g.kv_stride);
}

TEST(Geometry, AcceptsCommonLayouts) {
  EXPECT_TRUE(ValidateGeometry(FlashAttnNhd()).ok());
  // HND: [2, nb, h, bs, d]
  LayerGeometry hnd{64,  2,        16,          8, 256, 16 * 8 * 256, 64ull * 16 * 8 * 256,
                    256, 16 * 256, DType::kBF16};
  EXPECT_TRUE(ValidateGeometry(hnd).ok());
  // MLA FP8 656-byte entries, block 64.
  LayerGeometry mla{32, 1, 64, 1, 656, 64 * 656, 0, 656, 0, DType::kF8E4M3};
  EXPECT_TRUE(ValidateGeometry(mla).ok());
  // int8 132-byte heads.
  LayerGeometry int8{16,      2,   16,        4, 132, 16 * 4 * 132, 16ull * 16 * 4 * 132,
                     4 * 132, 132, DType::kI8};
  EXPECT_TRUE(ValidateGeometry(int8).ok());
}

TEST(Geometry, RejectsZeroCountsAndOverlaps) {
  LayerGeometry g = FlashAttnNhd();
  g.num_heads = 0;
  EXPECT_EQ(ValidateGeometry(g).code(), StatusCode::kInvalidArgument);
  g = FlashAttnNhd();
  g.token_stride = 100;  // tokens overlap their own heads
  Status s = ValidateGeometry(g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.ToString();
  g = FlashAttnNhd();
  g.kv_count = 3;
  EXPECT_FALSE(ValidateGeometry(g).ok());
  g = FlashAttnNhd();
  g.head_bytes = 255;  // not a whole number of bf16 elements
  EXPECT_FALSE(ValidateGeometry(g).ok());
}

TEST(Geometry, RejectsExtentsThatOverflow) {
  LayerGeometry g = FlashAttnNhd();
  g.block_stride = uint64_t{1} << 60;
  g.num_blocks = 1 << 20;
  EXPECT_FALSE(ValidateGeometry(g).ok());
}

}  // namespace
}  // namespace kvstash

namespace kvstash {
namespace {

// Found by the request fuzzer under UBSan: a span past 2^64 bytes was converted from a float to an
// integer (undefined) and printed as "must be at least 0 bytes".
TEST(Geometry, RefusesASpanPastTheLimitWithExactFigures) {
  const LayerGeometry g{
      1,  2,         0xffffffffu, 0xffffffffu, 64, 0, (uint64_t{1} << 38) + 1, uint64_t{1} << 38,
      64, DType::kU8};
  const Status s = ValidateGeometry(g);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().find("at least 0 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("token_stride 274877906944 times 4294967294"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("4611686018427387904 bytes"), std::string::npos) << s.message();
}

TEST(Geometry, OverlapMessageNamesTheExactSpan) {
  // Heads of 64 bytes, 3 of them 64 apart: tokens must be at least 192 apart.
  const LayerGeometry g{4, 1, 16, 3, 64, 16 * 100, 0, 100, 64, DType::kU8};
  const Status s = ValidateGeometry(g);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("token_stride 100 makes entries overlap: it must be at least 192 bytes"),
      std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace kvstash
