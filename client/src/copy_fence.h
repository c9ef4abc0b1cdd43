// The engine's side of the copy fence (docs/protocol.md "The copy fence"):
// a POSIX shared memory object of no size, named in RegisterKV and unlinked
// once answered, used only for its byte-range locks. kvstashd holds a read
// lock on byte `request id` while it copies that request's chunks; before
// libkvstash reports a sent Store or Retrieve failed (deadline, Goodbye,
// lost connection), it takes a write lock on that byte and keeps it, so that
// kvstashd copies nothing of the request afterwards. A read lock on byte 0,
// held while the fence is open, tells kvstashd that the client is alive:
// once it is gone, kvstashd copies nothing more for its requests.
//
// Shared by the registration that named it and the requests sent for it;
// used by the I/O thread only (Create and Unlink by whoever registers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvstash/status.h"

namespace kvstash::client {

class CopyFence {
 public:
  static Result<std::shared_ptr<CopyFence>> Create();
  ~CopyFence();  // closing drops every lock: only once no daemon may still copy
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;

  const std::string& name() const { return name_; }
  // Once kvstashd opened it (or refused it): nobody else can from now on.
  void Unlink();

  enum class GiveUp {
    kDone,   // the request is ours: kvstashd copies nothing of it from now on
    kBusy,   // kvstashd is copying it: ask again shortly
    kFailed  // the lock cannot be taken: the fence cannot say
  };
  GiveUp TryGiveUp(uint64_t request_id);

 private:
  CopyFence(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  const int fd_;
  const std::string name_;
  bool linked_ = true;
};

}  // namespace kvstash::client
