// A fixed set of threads that run index ranges of a parallel loop. Host
// memcpy reaches ~10 GB/s on one thread and far more on several, so the host
// backend spreads each batch's chunks over this pool. Its helpers are the
// threads of a runtime::WorkQueue.
// Thread-safe: several callers may run loops at once.
#pragma once

#include <cstddef>
#include <functional>

#include "kvstash/runtime/work_queue.h"

namespace kvstash::backends {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads) : helpers_(threads) {}
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(i) for i in [0, n) and returns when all are done; the caller
  // takes part in the work.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  runtime::WorkQueue helpers_;
};

}  // namespace kvstash::backends
