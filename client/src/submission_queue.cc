// The submission queue and its eventfd wakeup.
#include "submission_queue.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace kvstash::client {

SubmissionQueue::SubmissionQueue() : event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

SubmissionQueue::~SubmissionQueue() {
  if (event_fd_ >= 0) ::close(event_fd_);
}

bool SubmissionQueue::Push(ClientRequest& request) {
  {
    MutexLock lock(mutex_);
    if (closed_) return false;
    queue_.push_back(std::move(request));
  }
  Wake();
  return true;
}

void SubmissionQueue::Close() {
  {
    MutexLock lock(mutex_);
    closed_ = true;
  }
  Wake();
}

std::vector<ClientRequest> SubmissionQueue::Drain() {
  uint64_t count = 0;
  // Reset the counter before taking the queue: a push after this read wakes
  // the poll again, so none is missed.
  while (::read(event_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  MutexLock lock(mutex_);
  std::vector<ClientRequest> taken;
  taken.swap(queue_);
  return taken;
}

bool SubmissionQueue::closed() const {
  MutexLock lock(mutex_);
  return closed_;
}

void SubmissionQueue::Wait() const {
  pollfd item{event_fd_, POLLIN, 0};
  while (::poll(&item, 1, -1) < 0 && errno == EINTR) {
  }
}

void SubmissionQueue::Wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already huge: the I/O thread is awake anyway.
  while (::write(event_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

}  // namespace kvstash::client
