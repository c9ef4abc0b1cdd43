// Hands requests from API threads to the I/O thread: a mutex-guarded queue
// plus an eventfd that the I/O thread polls next to its socket (zmq_poll
// takes plain file descriptors), so no socket is shared between threads.
#pragma once

#include <mutex>
#include <vector>

#include "client_request.h"
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::client {

// Thread-safe.
class SubmissionQueue {
 public:
  SubmissionQueue();  // check fd() >= 0
  ~SubmissionQueue();
  SubmissionQueue(const SubmissionQueue&) = delete;
  SubmissionQueue& operator=(const SubmissionQueue&) = delete;

  int fd() const { return event_fd_; }
  // False once closed: the request is handed back untouched to fail it.
  bool Push(ClientRequest& request);
  // Stops accepting requests and wakes the I/O thread.
  void Close();
  // I/O thread: takes everything queued and clears the wakeup.
  std::vector<ClientRequest> Drain();
  bool closed() const;
  // Blocks until something is pushed or the queue closes.
  void Wait() const;

 private:
  void Wake();

  int event_fd_ = -1;
  mutable Mutex mutex_;
  std::vector<ClientRequest> queue_ KVSTASH_GUARDED_BY(mutex_);
  bool closed_ KVSTASH_GUARDED_BY(mutex_) = false;
};

}  // namespace kvstash::client
