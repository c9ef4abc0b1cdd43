// How a CUDA copy lane cuts a request into steps: layer ranges merged in
// growing steps (each slot still written after its own layers), a request
// without ranges in one step, and exact byte windows for odd head sizes
// (656-byte MLA, 132-byte int8 heads).
#include "cuda_copy_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "fake_groups.h"
#include "kvstash/chunk_layout.h"
#include "kvstash/layouts.h"

namespace kvstash::backends {
namespace {

// The signal of a layer-wise retrieve of `ranges` even ranges over one group.
CopySignal LayerWise(uint32_t layers, uint32_t ranges) {
  CopySignal signal;
  for (uint32_t k = 0; k < ranges; ++k) {
    const uint32_t first = layers * k / ranges, end = layers * (k + 1) / ranges;
    signal.ranges.push_back({{first, end - first}});
    signal.range_slots.push_back(100 + k);
  }
  return signal;
}

// Every step's windows, in order, must tile the chunk's group bytes exactly once.
void ExpectWindowsTile(const FakeGroups& g, const std::vector<CopyStep>& steps) {
  std::vector<std::pair<uint64_t, uint64_t>> all;
  for (const CopyStep& s : steps) all.insert(all.end(), s.windows.begin(), s.windows.end());
  std::sort(all.begin(), all.end());
  uint64_t covered = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(all[i - 1].second, all[i].first) << "windows overlap";
    }
    covered += all[i].second - all[i].first;
  }
  uint64_t group_bytes = 0;
  for (const GroupAddresses& a : g.groups) group_bytes += FlatGroupBytes(a.group.shape);
  EXPECT_EQ(covered, group_bytes);
}

TEST(CudaCopySteps, EightyLayerRangesTakeGrowingStepsAndEverySlotComesAfterItsLayers) {
  const LayerGeometry geometry = VllmFlashNhdGeometry(8, 16, 1, 128, DType::kBF16);
  const FakeGroups g = MakeFakeGroups(std::vector<LayerGeometry>(80, geometry), 256);
  const CopySignal signal = LayerWise(80, 80);
  const std::vector<CopyStep> steps = CopySteps(g.groups, &signal);
  std::vector<uint32_t> sizes, slots;
  uint32_t next_layer = 0;
  for (const CopyStep& s : steps) {
    ASSERT_EQ(s.slices.size(), 1u);
    EXPECT_EQ(s.slices[0].first, next_layer) << "steps follow each other";
    next_layer += s.slices[0].second;
    sizes.push_back(s.slices[0].second);
    // Range k's slot is in the step that holds layer k.
    for (uint32_t slot : s.slots) {
      const uint32_t k = slot - 100;
      EXPECT_GE(k, s.slices[0].first);
      EXPECT_LT(k, s.slices[0].first + s.slices[0].second);
    }
    slots.insert(slots.end(), s.slots.begin(), s.slots.end());
  }
  EXPECT_EQ(next_layer, 80u);
  EXPECT_EQ(sizes, (std::vector<uint32_t>{1, 1, 2, 4, 8, 16, 32, 16}));
  std::vector<uint32_t> expected(80);
  std::iota(expected.begin(), expected.end(), 100);
  EXPECT_EQ(slots, expected) << "every range's slot, once, in order";
  ExpectWindowsTile(g, steps);
}

TEST(CudaCopySteps, ARequestWithoutRangesIsOneStepOfTheWholeChunk) {
  const LayerGeometry geometry = VllmFlashNhdGeometry(8, 16, 8, 128, DType::kBF16);
  const FakeGroups g = MakeFakeGroups(std::vector<LayerGeometry>(32, geometry), 256);
  CopySignal signal;
  signal.range_slots = {5};
  const std::vector<CopyStep> one = CopySteps(g.groups, &signal);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].slices[0], (std::pair<uint32_t, uint32_t>{0, 32}));
  EXPECT_TRUE(one[0].windows.empty());
  EXPECT_EQ(one[0].slots, (std::vector<uint32_t>{5}));
}

TEST(CudaCopySteps, WindowsAreExactForOddHeadSizes) {
  // DeepSeek MLA FP8: 61 layers of one 656-byte head, block 64; and int8
  // heads of 132 bytes (not a multiple of 16): layer ranges must tile the
  // flat chunk's bytes exactly.
  for (const auto& [heads, head_dim, dtype, layers] :
       std::vector<std::tuple<uint32_t, uint32_t, DType, uint32_t>>{{1, 656, DType::kU8, 61},
                                                                    {4, 132, DType::kU8, 27}}) {
    const LayerGeometry geometry = VllmFlashNhdGeometry(8, 64, heads, head_dim, dtype);
    const FakeGroups g = MakeFakeGroups(std::vector<LayerGeometry>(layers, geometry), 256);
    const CopySignal signal = LayerWise(layers, std::min<uint32_t>(layers, 64));
    ExpectWindowsTile(g, CopySteps(g.groups, &signal));
  }
}

}  // namespace
}  // namespace kvstash::backends
