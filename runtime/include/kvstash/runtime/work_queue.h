// A fixed set of threads running queued tasks in order of arrival: the one
// task queue of the daemon and the tiers (the background thread that builds
// Describe and Stats replies, the host backend's copy helpers, each tier's
// I/O threads).
// Thread-safe: any thread may Post; the destructor runs the tasks already
// queued, then joins.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::runtime {

class WorkQueue {
 public:
  // `name` names the threads (top, gdb; Linux keeps 15 characters); empty:
  // they keep the creator's name.
  explicit WorkQueue(size_t threads, const std::string& name = std::string());
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> task);
  size_t threads() const { return threads_.size(); }

 private:
  void Run();
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ KVSTASH_GUARDED_BY(mutex_);
  bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvstash::runtime
