// A small fork-join pool for the host backend's copies.
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>

#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::backends {

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || helpers_.threads() == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Work stealing by a shared counter: helpers and the caller take indices
  // until none remain; the caller waits for stragglers.
  struct Loop {
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    Mutex mutex;
    std::condition_variable finished;
  };
  auto loop = std::make_shared<Loop>();
  auto run = [loop, n, &fn] {
    for (size_t i; (i = loop->next.fetch_add(1)) < n;) {
      fn(i);
      if (loop->done.fetch_add(1) + 1 == n) {
        MutexLock lock(loop->mutex);
        loop->finished.notify_all();
      }
    }
  };
  const size_t helpers = std::min(helpers_.threads(), n - 1);
  for (size_t i = 0; i < helpers; ++i) helpers_.Post(run);
  run();
  MutexLock lock(loop->mutex);
  loop->finished.wait(lock.native(), [&] { return loop->done.load() == n; });
}

}  // namespace kvstash::backends
