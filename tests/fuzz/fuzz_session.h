// One daemon's request path in this process, as the fuzzer drives it: a
// real Service on the host backend (its L1 pool, chunk store, registry and
// transfer workers), and the engine memory (a real POSIX shm object) that
// RegisterKV messages name. Run() hands every message of an input to
// Service::Handle, waits for the deferred replies, checks that every reply
// verifies, and undoes what the input registered.
// Not thread-safe: libFuzzer calls it from one thread.
#pragma once

#include <memory>
#include <vector>

#include "reply_queue.h"
#include "service.h"

namespace kvstash::fuzz {

class FuzzSession {
 public:
  // Creates the shm object and the Service; aborts on failure (a harness
  // that cannot start must not report a clean run).
  FuzzSession();
  ~FuzzSession();
  void Run(const uint8_t* data, size_t size);

 private:
  // Handles one message and every reply it causes; learns registration and
  // lease ids from the replies.
  void HandleOne(std::vector<uint8_t>& message);
  void TakeReply(const uint8_t* data, size_t size);
  // Registration ids 1..8 and lease ids 1..8 name those learned in this input.
  void RewriteIds(std::vector<uint8_t>& message) const;

  server::ReplyQueue replies_;
  std::unique_ptr<server::Service> service_;
  int shm_fd_ = -1;
  std::vector<uint64_t> registrations_;  // learned in the current input
  std::vector<uint64_t> leases_;
};

}  // namespace kvstash::fuzz
