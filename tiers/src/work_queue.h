// A fixed set of threads running queued jobs in order of arrival. Each tier
// owns one, so that its I/O never runs on a caller's thread.
// Thread-safe: any thread may Post; the destructor runs the jobs already
// queued, then joins.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::tiers::internal {

class WorkQueue {
 public:
  WorkQueue(size_t threads, std::string name);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> job);
  size_t threads() const { return threads_.size(); }

 private:
  void Run();
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_ KVSTASH_GUARDED_BY(mutex_);
  bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvstash::tiers::internal
