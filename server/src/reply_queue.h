// Replies finished off the frontend thread (by transfer workers) travel back
// through this queue, so the ROUTER socket stays owned by the frontend thread
// alone. A frontend that is about to sleep says so (Sleeping); only then does
// Push write the eventfd that wakes its poll. A spinning frontend reads
// pending() instead, and the lane saves the system call.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvstash/proto/codec.h"
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::server {

// Who a reply goes to: the ROUTER identity of the peer.
using PeerId = std::string;

struct OutgoingReply {
  PeerId peer;
  proto::Bytes bytes;
  uint64_t request_id = 0;
};

class ReplyQueue {
 public:
  ReplyQueue();
  ~ReplyQueue();
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;

  // request_id: for the stage trace only.
  void Push(PeerId peer, proto::Bytes bytes, uint64_t request_id = 0);
  std::vector<OutgoingReply> TakeAll();  // also clears the wake-up
  int wake_fd() const { return fd_; }
  // Replies pushed and not yet taken.
  bool pending() const { return count_.load() > 0; }
  // Frontend: true before a blocking poll, false after it. Returns whether a
  // reply is pending (then the poll must not block). A Push after this call
  // writes the eventfd; one before it is seen in the return value.
  bool Sleeping(bool sleeping);

 private:
  int fd_;
  Mutex mutex_;
  std::vector<OutgoingReply> replies_ KVSTASH_GUARDED_BY(mutex_);
  std::atomic<size_t> count_{0};      // replies_.size(), read without the lock
  std::atomic<bool> sleeping_{true};  // the frontend may be in a blocking poll
};

}  // namespace kvstash::server
