// Replies finished off the frontend thread (by transfer workers) travel back
// through this queue; an eventfd wakes the frontend's poll, so the ROUTER
// socket stays owned by the frontend thread alone.
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvstash/proto/codec.h"

namespace kvstash::server {

// Who a reply goes to: the ROUTER identity of the peer.
using PeerId = std::string;

struct OutgoingReply {
  PeerId peer;
  proto::Bytes bytes;
};

class ReplyQueue {
 public:
  ReplyQueue();
  ~ReplyQueue();
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;

  void Push(PeerId peer, proto::Bytes bytes);
  std::vector<OutgoingReply> TakeAll();  // also clears the wake-up
  int wake_fd() const { return fd_; }

 private:
  int fd_;
  std::mutex mutex_;
  std::vector<OutgoingReply> replies_;  // GUARDED_BY(mutex_)
};

}  // namespace kvstash::server
