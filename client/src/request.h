// One request on its way through the client's I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "kvstash/proto/codec.h"
#include "kvstash/status.h"

namespace kvstash::client {

using Clock = std::chrono::steady_clock;

// What a request's completion receives.
struct Reply {
  const wire::Envelope* envelope = nullptr;  // verified; valid only during the call
  uint64_t boot_epoch = 0;                   // the session's epoch when it arrived
};

// Called exactly once, on the I/O thread (or on the submitting thread when
// the client is already shutting down). Must not throw.
using ReplyHandler = std::function<void(Result<Reply>)>;

struct Request {
  uint64_t id = 0;
  const char* kind = "";  // "Store": for error messages
  proto::Bytes bytes;     // released once sent
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;
  // Nonzero for requests naming a registration: they are only valid while
  // kvstashd is the same boot that registered it (see IoLoop).
  uint64_t boot_epoch = 0;
  bool sent = false;
  ReplyHandler on_reply;

  // "request 17 (Store)"
  std::string Name() const { return "request " + std::to_string(id) + " (" + kind + ")"; }
};

}  // namespace kvstash::client
