// One thread that runs tasks in order, off the frontend: requests whose work
// grows with the number of registrations or clients (Describe, Stats) are
// built here and answered through the reply queue, so they never delay the
// frontend's other clients.
// Thread-safe: Post from any thread. The destructor runs what is queued,
// then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::server {

class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ KVSTASH_GUARDED_BY(mutex_);
  bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace kvstash::server
