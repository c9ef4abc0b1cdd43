// The synthetic engine of `kvstash bench`: its pattern is deterministic and
// its checks catch wrong, missing and stray bytes.
#include <gtest/gtest.h>

#include <numeric>

#include "kvstash/bench/bench_kv.h"
#include "kvstash/bench/bench_pattern.h"
#include "kvstash/bench/bench_report.h"

namespace kvstash::bench {
namespace {

TEST(BenchPattern, DependsOnEveryField) {
  const RowId base{1, 0, 500, 7, 3};
  std::vector<uint8_t> a(20), b(20);
  PatternRow(base, a.data(), a.size());
  PatternRow(base, b.data(), b.size());
  EXPECT_EQ(a, b);
  for (int field = 0; field < 5; ++field) {
    RowId other = base;
    if (field == 0) other.layer++;
    if (field == 1) other.kv++;
    if (field == 2) other.token++;
    if (field == 3) other.position++;
    if (field == 4) other.head++;
    PatternRow(other, b.data(), b.size());
    EXPECT_NE(a, b) << "field " << field;
  }
}

class SyntheticKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvShape shape;
    shape.layers = 3;
    shape.kv_heads = 2;
    shape.head_dim = 10;  // 20 bytes: not a multiple of 8
    shape.block_tokens = 4;
    shape.num_blocks = 8;
    auto kv = SyntheticKv::Create(shape);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    kv_.emplace(std::move(*kv));
    tokens_.resize(10);
    std::iota(tokens_.begin(), tokens_.end(), 1000);
  }
  std::optional<SyntheticKv> kv_;
  std::vector<int32_t> tokens_;
  const std::vector<uint32_t> table_ = {5, 2, 7};  // 10 tokens in 3 blocks of 4
};

TEST_F(SyntheticKvTest, DescribesVllmNhdLayers) {
  const LayerGeometry& g = kv_->geometry();
  EXPECT_EQ(g.head_bytes, 20u);
  EXPECT_EQ(g.token_stride, 40u);
  EXPECT_EQ(g.block_stride, 160u);
  EXPECT_EQ(g.kv_stride, 160u * 8);
  const RegisterOptions options = kv_->Registration("m");
  ASSERT_EQ(options.layers.size(), 3u);
  EXPECT_EQ(options.layers[2].offset_bytes, 2 * 2 * 160u * 8);
  EXPECT_EQ(kv_->size_bytes(), 3 * 2 * 160u * 8);
  EXPECT_EQ(kv_->token_bytes(), 3u * 2 * 2 * 20);
}

TEST_F(SyntheticKvTest, FilledBlocksPassTheirCheck) {
  kv_->Poison(table_.data(), table_.size());
  kv_->Fill(tokens_.data(), tokens_.size(), table_.data());
  Mismatches found;
  kv_->CheckPattern(tokens_.data(), 0, tokens_.size(), table_.data(), found);
  kv_->CheckPoison(10, 12, table_.data(), found);  // the rest of the last block
  EXPECT_EQ(found.rows, 0u) << found.first;
}

TEST_F(SyntheticKvTest, CheckFindsAWrongByte) {
  kv_->Fill(tokens_.data(), tokens_.size(), table_.data());
  auto other = tokens_;
  other[6] = 1;  // as if another prompt's token had been retrieved there
  Mismatches found;
  kv_->CheckPattern(other.data(), 0, other.size(), table_.data(), found);
  EXPECT_EQ(found.rows, 3u * 2 * 2);  // every (layer, kv, head) row of one position
  EXPECT_NE(found.first.find("position 6"), std::string::npos) << found.first;
}

TEST_F(SyntheticKvTest, CheckFindsUnwrittenAndStrayRows) {
  kv_->Poison(table_.data(), table_.size());
  kv_->Fill(tokens_.data(), 5, table_.data());  // positions 5.. never written
  Mismatches missing;
  kv_->CheckPattern(tokens_.data(), 0, 10, table_.data(), missing);
  EXPECT_EQ(missing.rows, 5u * 3 * 2 * 2);
  EXPECT_NE(missing.first.find("never written"), std::string::npos) << missing.first;
  Mismatches stray;
  kv_->CheckPoison(4, 10, table_.data(), stray);  // position 4 was written
  EXPECT_EQ(stray.rows, 3u * 2 * 2);
  EXPECT_NE(stray.first.find("outside what was retrieved"), std::string::npos) << stray.first;
}

TEST(BenchReport, PercentileIsNearestRank) {
  std::vector<double> values(100);
  std::iota(values.begin(), values.end(), 1.0);
  EXPECT_EQ(Percentile(values, 0.5), 50.0);
  EXPECT_EQ(Percentile(values, 0.99), 99.0);
  EXPECT_EQ(Percentile({3.0}, 0.99), 3.0);
  EXPECT_EQ(Percentile({}, 0.5), 0.0);
}

}  // namespace
}  // namespace kvstash::bench
