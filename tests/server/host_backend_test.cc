// The host backend checks each chunk's deadline before every (layer, chunk)
// copy task: a chunk past its deadline gets no byte written and is reported.
#include "host_backend.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "kvstash/chunk_layout.h"
#include "kvstash/layouts.h"

namespace kvstash::server {
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

}  // namespace
}  // namespace kvstash::server
