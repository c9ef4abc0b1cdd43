// The reply queue between copy lanes and the frontend: a frontend that
// alternates between spinning and sleeping never misses a reply, and each
// lane's replies come out in the order it pushed them.
#include "reply_queue.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

namespace kvstash::server {
namespace {

TEST(ReplyQueueTest, ASleepingFrontendIsWokenAndASpinningOneSeesTheCount) {
  ReplyQueue queue;
  EXPECT_FALSE(queue.Sleeping(true));
  queue.Push("a", proto::Bytes{1}, 7);
  pollfd item{queue.wake_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&item, 1, 0), 1);  // the sleeper's eventfd fired
  EXPECT_TRUE(queue.Sleeping(false));
  std::vector<OutgoingReply> taken = queue.TakeAll();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].request_id, 7u);
  EXPECT_FALSE(queue.pending());

  // Spinning: the lane skips the write; the count says there is a reply.
  queue.Push("a", proto::Bytes{2}, 8);
  EXPECT_EQ(::poll(&item, 1, 0), 0);
  EXPECT_TRUE(queue.pending());
  EXPECT_TRUE(queue.Sleeping(true));  // must not block now
  EXPECT_EQ(queue.TakeAll().size(), 1u);
}

TEST(ReplyQueueTest, NoReplyIsLostOrReorderedWhileTheFrontendSpinsAndSleeps) {
  ReplyQueue queue;
  constexpr int kLanes = 4;
  constexpr uint64_t kPerLane = 20000;
  std::atomic<bool> lost_wakeup{false};
  std::map<PeerId, uint64_t> next;  // per lane, the id expected next
  uint64_t received = 0;
  std::thread frontend([&] {
    int turn = 0;
    while (received < kLanes * kPerLane) {
      // Alternate: a few turns spinning, then one asleep.
      const bool sleep = ++turn % 4 == 0;
      const bool waiting = queue.Sleeping(sleep);
      if (sleep && !waiting) {
        pollfd item{queue.wake_fd(), POLLIN, 0};
        // Lanes push far faster than this: 2 s of silence is a lost wake-up.
        if (::poll(&item, 1, 2000) == 0) {
          lost_wakeup = true;
          return;
        }
        queue.Sleeping(false);
      }
      for (const OutgoingReply& reply : queue.TakeAll()) {
        EXPECT_EQ(reply.request_id, next[reply.peer]) << reply.peer;
        next[reply.peer] = reply.request_id + 1;
        ++received;
      }
    }
  });
  std::vector<std::thread> lanes;
  for (int l = 0; l < kLanes; ++l) {
    lanes.emplace_back([&queue, l] {
      for (uint64_t id = 0; id < kPerLane; ++id) {
        queue.Push("lane" + std::to_string(l), proto::Bytes{uint8_t(id)}, id);
        if (id % 64 == 0) std::this_thread::yield();
      }
    });
  }
  for (std::thread& lane : lanes) lane.join();
  frontend.join();
  EXPECT_FALSE(lost_wakeup.load());
  EXPECT_EQ(received, kLanes * kPerLane);
}

}  // namespace
}  // namespace kvstash::server
