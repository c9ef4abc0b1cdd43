// The engine's copy fence (docs/protocol.md "The copy fence"): a POSIX shared
// memory object the engine created and named in RegisterKV, used only for
// its byte-range locks (open file description locks), never mapped. Byte
// `request id` stands for that request: a lane holds a read lock on it for
// as long as it copies the request's chunks (GPU copies drained included),
// and an engine that gives the request up takes a write lock on it and
// reports the failure only once it has it. So either the lane holds the
// byte first and the engine waits for its copy to end, or the engine holds
// it first and the lane copies nothing of the request. The engine holds a
// read lock on byte 0 while its client lives: without it (the client was
// destroyed, or its process ended, and its locks went with it) every
// request is given up. The kernel drops the daemon's locks when it exits; a
// stopped daemon keeps them. While the fence is open, the daemon's process
// also holds a classic (process-associated) read lock on its own byte
// (kvstash/copy_fence_bytes.h): the engine learns from it which process
// holds the fence, and whether that process has begun to exit, which drops
// this lock before the requests' (docs/protocol.md "The copy fence").
//
// Owned by one registration (lanes hold it through the registration).
// Thread-safe: each call is one fcntl on bytes no other thread holds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvstash/status.h"
#include "peer.h"

namespace kvstash::server {

class CopyFence {
 public:
  // Opens the engine's object read-only, after checking that the peer could
  // open it itself (docs/protocol.md "Trust"), and locks the daemon's byte.
  static Result<std::shared_ptr<CopyFence>> Open(const std::string& shm_name,
                                                 const std::optional<PeerCredentials>& opener);
  ~CopyFence();
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;

  // Holds request `request_id` for a copy: Ok(false) when the engine
  // already gave it up or is gone (nothing of it may be copied), an error
  // when the lock cannot be taken (then nothing may be copied either).
  Result<bool> Hold(uint64_t request_id);
  void Release(uint64_t request_id);
  // Whether the engine gave the request up or is gone, without holding it
  // (a store waiting for its gate).
  bool GivenUp(uint64_t request_id) const;

 private:
  // Whether the engine's client still holds byte 0.
  bool EngineAlive() const;
  CopyFence(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  const int fd_;
  const std::string name_;
};

}  // namespace kvstash::server
