// eventfd-backed reply queue.
#include "reply_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <stdexcept>

namespace kvstash::server {

ReplyQueue::ReplyQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::runtime_error("eventfd failed");  // at startup only
}

ReplyQueue::~ReplyQueue() { close(fd_); }

void ReplyQueue::Push(PeerId peer, proto::Bytes bytes, uint64_t request_id) {
  {
    MutexLock lock(mutex_);
    replies_.push_back(OutgoingReply{std::move(peer), std::move(bytes), request_id});
    count_.fetch_add(1);  // sequentially consistent: ordered before the load below
  }
  // Pairs with Sleeping: either the frontend sees count_ before it blocks,
  // or this sees sleeping_ and wakes it.
  if (!sleeping_.load()) return;
  const uint64_t one = 1;
  ssize_t written = write(fd_, &one, sizeof(one));
  (void)written;  // a full counter still wakes the reader
}

std::vector<OutgoingReply> ReplyQueue::TakeAll() {
  uint64_t count;
  ssize_t got = read(fd_, &count, sizeof(count));
  (void)got;
  MutexLock lock(mutex_);
  std::vector<OutgoingReply> out;
  out.swap(replies_);
  count_.fetch_sub(out.size());
  return out;
}

bool ReplyQueue::Sleeping(bool sleeping) {
  sleeping_.store(sleeping);
  return count_.load() > 0;
}

}  // namespace kvstash::server
