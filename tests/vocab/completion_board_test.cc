// The completion board's release rule, as both sides apply it.
#include "kvstash/completion_board.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace kvstash {
namespace {

TEST(CompletionBoard, ReleaseWritesEveryStatusBeforeAnyValue) {
  const uint32_t slots[] = {7, 8, 9, 3};
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> writes;  // slot, offset, value
  EXPECT_TRUE(ReleaseBoardSlots(slots, 4, /*sequence=*/42, /*status=*/5,
                                [&](uint32_t slot, uint32_t offset, uint32_t value) {
                                  writes.emplace_back(slot, offset, value);
                                  return true;
                                }));
  ASSERT_EQ(writes.size(), 8u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(writes[i], std::make_tuple(slots[i], kBoardStatusOffset, 5u));
    EXPECT_EQ(writes[4 + i], std::make_tuple(slots[i], kBoardValueOffset, 42u));
  }
}

TEST(CompletionBoard, ReleaseWritesEverySlotEvenWhenOneWriteFails) {
  const uint32_t slots[] = {0, 1, 2};
  std::vector<uint8_t> board(3 * kBoardSlotBytes, 0);
  const bool ok =
      ReleaseBoardSlots(slots, 3, 9, 0, [&](uint32_t slot, uint32_t offset, uint32_t value) {
        if (slot == 1) return false;  // its memory is gone
        StoreBoardWord(board.data(), slot, offset, value);
        return true;
      });
  EXPECT_FALSE(ok);
  EXPECT_EQ(LoadBoardWord(board.data(), 0, kBoardValueOffset), 9u);
  EXPECT_EQ(LoadBoardWord(board.data(), 2, kBoardValueOffset), 9u);
}

}  // namespace
}  // namespace kvstash
