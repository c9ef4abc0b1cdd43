// A fixed set of threads that run index ranges of a parallel loop. Host
// memcpy reaches ~10 GB/s on one thread and far more on several, so the host
// backend spreads each batch's chunks over this pool.
// Thread-safe: several callers may run loops at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::backends {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(i) for i in [0, n) and returns when all are done; the caller
  // takes part in the work.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  void WorkerLoop();
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ KVSTASH_GUARDED_BY(mutex_);
  bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvstash::backends
