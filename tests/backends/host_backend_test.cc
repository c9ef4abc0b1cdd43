// The host backend checks each chunk's deadline before every (layer, chunk)
// copy task: a chunk past its deadline gets no byte written and is reported.
// Each group is checked and prepared once per call, before any task: a group
// that cannot be copied, or a layer range past its group, fails the call with
// nothing written.
#include "host_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "kvstash/chunk_layout.h"
#include "kvstash/layouts.h"

namespace kvstash::backends {
namespace {

TEST(HostBackendTest, ARetrieveWritesNoBlockOfAChunkPastItsDeadline) {
  const LayerGeometry g = VllmFlashNhdGeometry(4, 16, 2, 64, DType::kBF16);
  Result<ChunkLayout> layout = ChunkLayout::Build({g, g}, 16);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<std::vector<uint8_t>> engine(2, std::vector<uint8_t>(LayerExtentBytes(g), 0));
  std::vector<GroupAddresses> groups;
  for (const ChunkGroup& group : layout->groups()) {
    GroupAddresses addresses;
    for (uint32_t layer : group.layers) addresses.layer_bases.push_back(engine[layer].data());
    addresses.group = kernels::GroupCopy{group.geometry, group.shape, group.offset_bytes, nullptr};
    groups.push_back(std::move(addresses));
  }
  for (GroupAddresses& a : groups) a.group.layer_bases = a.layer_bases.data();
  std::vector<uint8_t> flat0(layout->chunk_bytes(), 0xAB), flat1(layout->chunk_bytes(), 0xCD);
  const uint32_t block0 = 0, block1 = 1;
  const std::vector<kernels::ChunkCopy> chunks = {{flat0.data(), &block0, 1, 16, 0},
                                                  {flat1.data(), &block1, 1, 16, 0}};
  CopyDeadlines deadlines;
  const auto now = std::chrono::steady_clock::now();
  deadlines.at = {now + std::chrono::hours(1), now - std::chrono::milliseconds(1)};
  HostBackend backend(2);
  const CopyLayout copy_layout{1, layout->chunk_bytes(), groups};
  ASSERT_TRUE(backend.Copy(Direction::kRetrieve, 0, copy_layout, chunks, {0, 0}, deadlines).ok());
  EXPECT_EQ(deadlines.missed, (std::vector<uint8_t>{0, 1}));
  for (const auto& layer : engine) {
    EXPECT_GT(std::count(layer.begin(), layer.end(), 0xAB), 0) << "chunk 0 was written";
    EXPECT_EQ(std::count(layer.begin(), layer.end(), 0xCD), 0) << "chunk 1 was written";
  }
}

// Two groups of two layers each, interleaved ({a, b, a, b}), over engine
// layers of random bytes; chunks of 16 tokens, one block each.
class HostBackendGroupsTest : public ::testing::Test {
 protected:
  HostBackendGroupsTest() {
    const LayerGeometry a = VllmFlashNhdGeometry(4, 16, 2, 64, DType::kBF16);
    const LayerGeometry b = VllmFlashNhdGeometry(4, 16, 1, 96, DType::kBF16);
    layout_ = std::make_unique<ChunkLayout>(*ChunkLayout::Build({a, b, a, b}, 16));
    std::mt19937 rng(3);
    for (const LayerGeometry& g : {a, b, a, b}) {
      std::vector<uint8_t>& layer = engine_.emplace_back(LayerExtentBytes(g));
      for (uint8_t& byte : layer) byte = uint8_t(rng() % 200 + 1);  // never 0 nor 0xCD
    }
    for (const ChunkGroup& group : layout_->groups()) {
      GroupAddresses addresses;
      for (uint32_t layer : group.layers) addresses.layer_bases.push_back(engine_[layer].data());
      addresses.group =
          kernels::GroupCopy{group.geometry, group.shape, group.offset_bytes, nullptr};
      groups_.push_back(std::move(addresses));
    }
    for (GroupAddresses& g : groups_) g.group.layer_bases = g.layer_bases.data();
    flats_.assign(2, std::vector<uint8_t>(layout_->chunk_bytes(), 0xCD));
    chunks_ = {{flats_[0].data(), &blocks_[0], 1, 16, 0}, {flats_[1].data(), &blocks_[1], 1, 9, 0}};
  }

  Status Copy(Direction direction, const CopySignal* signal = nullptr) {
    CopyDeadlines deadlines;
    const CopyLayout layout{7, layout_->chunk_bytes(), groups_};
    Status status = backend_.Copy(direction, 0, layout, chunks_, {0, 0}, deadlines, signal);
    missed_ = deadlines.missed;
    return status;
  }

  std::unique_ptr<ChunkLayout> layout_;
  std::vector<std::vector<uint8_t>> engine_;
  std::vector<GroupAddresses> groups_;
  std::vector<std::vector<uint8_t>> flats_;
  const uint32_t blocks_[2] = {2, 1};
  std::vector<kernels::ChunkCopy> chunks_;
  std::vector<uint8_t> missed_;
  HostBackend backend_{2};
};

TEST_F(HostBackendGroupsTest, AStoreGathersEveryLayerOfEveryGroup) {
  ASSERT_EQ(layout_->groups().size(), 2u);
  // What one whole-group gather per group writes (the kernels' tests hold
  // that against a byte-by-byte reference).
  std::vector<std::vector<uint8_t>> expected = flats_;
  std::vector<kernels::ChunkCopy> expected_chunks = chunks_;
  for (size_t c = 0; c < expected.size(); ++c) expected_chunks[c].flat = expected[c].data();
  for (const GroupAddresses& g : groups_) {
    ASSERT_TRUE(
        kernels::GatherChunksCpu(g.group, expected_chunks.data(), expected_chunks.size()).ok());
  }

  ASSERT_TRUE(Copy(Direction::kStore).ok());

  EXPECT_EQ(missed_, (std::vector<uint8_t>{0, 0}));
  for (size_t c = 0; c < flats_.size(); ++c) {
    EXPECT_TRUE(flats_[c] == expected[c]) << "chunk " << c;
    EXPECT_EQ(std::count(flats_[c].begin(), flats_[c].end(), 0xCD), 0) << "chunk " << c;
  }
}

TEST_F(HostBackendGroupsTest, AGroupThatCannotBeCopiedFailsTheCallBeforeAnyCopy) {
  const std::vector<std::vector<uint8_t>> engine_before = engine_;
  for (auto& flat : flats_) std::fill(flat.begin(), flat.end(), 0xAB);
  const std::vector<std::vector<uint8_t>> flats_before = flats_;
  groups_[1].layer_bases[1] = nullptr;  // group 0 alone could be copied

  const Status retrieve = Copy(Direction::kRetrieve);
  EXPECT_EQ(retrieve.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(retrieve.message().find("group 1 of registration 7"), std::string::npos)
      << retrieve.ToString();
  EXPECT_NE(retrieve.message().find("layer 1"), std::string::npos) << retrieve.ToString();
  EXPECT_EQ(missed_, (std::vector<uint8_t>{0, 0}));
  EXPECT_TRUE(engine_ == engine_before) << "a retrieve wrote engine layers";

  const Status store = Copy(Direction::kStore);
  EXPECT_EQ(store.ToString(), retrieve.ToString());
  EXPECT_TRUE(flats_ == flats_before) << "a store wrote flat chunks";
}

TEST_F(HostBackendGroupsTest, ALayerRangePastItsGroupFailsTheCallBeforeAnyCopy) {
  const std::vector<std::vector<uint8_t>> engine_before = engine_;
  CopySignal signal;  // refused before any slot is written: no board needed
  signal.ranges = {{{0, 1}, {0, 1}}, {{1, 1}, {1, 2}}};
  const Status status = Copy(Direction::kRetrieve, &signal);
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("layer range 1 takes layers [1, 3) of group 1, which has 2"),
            std::string::npos)
      << status.ToString();
  EXPECT_TRUE(engine_ == engine_before) << "a retrieve wrote engine layers";
}

}  // namespace
}  // namespace kvstash::backends
