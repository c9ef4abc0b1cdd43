// A small fork-join pool for the host backend's copies.
#include "thread_pool.h"
#include "kvstash/runtime/thread_annotations.h"

#include <atomic>
#include <memory>

namespace kvstash::backends {

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mutex_);
      wake_.wait(lock.native(),
                 [this]() KVSTASH_REQUIRES(mutex_) { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || threads_.empty()) {
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
  const size_t helpers = std::min(threads_.size(), n - 1);
  {
    MutexLock lock(mutex_);
    for (size_t i = 0; i < helpers; ++i) tasks_.push_back(run);
  }
  for (size_t i = 0; i < helpers; ++i) wake_.notify_one();
  run();
  MutexLock lock(loop->mutex);
  loop->finished.wait(lock.native(), [&] { return loop->done.load() == n; });
}

}  // namespace kvstash::backends
