// The task queue the daemon and the tiers run their background work on.
#include "kvstash/runtime/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kvstash::runtime {
namespace {

TEST(WorkQueue, OneThreadRunsTasksInOrderOfArrival) {
  std::vector<int> ran;
  {
    WorkQueue queue(1);
    for (int i = 0; i < 100; ++i) queue.Post([&ran, i] { ran.push_back(i); });
  }
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
}

TEST(WorkQueue, DestructorRunsEveryQueuedTaskBeforeJoining) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    WorkQueue queue(2);
    // Both threads busy: the others wait in the queue when it is destroyed.
    for (int i = 0; i < 2; ++i)
      queue.Post([&ran, released] {
        released.wait();
        ++ran;
      });
    for (int i = 0; i < 50; ++i) queue.Post([&ran] { ++ran; });
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 52);
}

TEST(WorkQueue, TasksRunOnTheQueuesOwnThreads) {
  std::mutex mutex;
  std::set<std::thread::id> seen;
  WorkQueue queue(3, "kvstash-test");
  EXPECT_EQ(queue.threads(), 3u);
  std::vector<std::future<void>> done;
  for (int i = 0; i < 30; ++i) {
    auto task = std::make_shared<std::promise<void>>();
    done.push_back(task->get_future());
    queue.Post([&, task] {
      {
        std::lock_guard<std::mutex> lock(mutex);
        seen.insert(std::this_thread::get_id());
      }
      task->set_value();
    });
  }
  for (auto& f : done) f.wait();
  EXPECT_EQ(seen.count(std::this_thread::get_id()), 0u);
  EXPECT_GE(seen.size(), 1u);
  EXPECT_LE(seen.size(), 3u);
}

}  // namespace
}  // namespace kvstash::runtime
