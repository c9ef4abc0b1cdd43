// The task queue's threads.
#include "kvstash/runtime/work_queue.h"

#include <pthread.h>

namespace kvstash::runtime {

WorkQueue::WorkQueue(size_t threads, const std::string& name) {
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
    if (!name.empty())
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

void WorkQueue::Post(std::function<void()> task) {
  {
    MutexLock lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void WorkQueue::Run() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mutex_);
      wake_.wait(lock.native(),
                 [this]() KVSTASH_REQUIRES(mutex_) { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything queued ran
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvstash::runtime
