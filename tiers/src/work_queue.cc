#include "work_queue.h"
#include "kvstash/runtime/thread_annotations.h"

#include <pthread.h>

namespace kvstash::tiers::internal {

WorkQueue::WorkQueue(size_t threads, std::string name) {
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
    // Thread names show in top and gdb; Linux allows 15 characters.
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

WorkQueue::~WorkQueue() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkQueue::Post(std::function<void()> job) {
  {
    MutexLock lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void WorkQueue::Run() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(mutex_);
      wake_.wait(lock.native(),
                 [this]() KVSTASH_REQUIRES(mutex_) { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace kvstash::tiers::internal
