// The background task thread.
#include "background_worker.h"

namespace kvstash::server {

BackgroundWorker::BackgroundWorker() : thread_([this] { Loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void BackgroundWorker::Post(std::function<void()> task) {
  {
    MutexLock lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void BackgroundWorker::Loop() {
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

}  // namespace kvstash::server
