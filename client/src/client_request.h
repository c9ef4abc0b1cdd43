// One request on its way through the client's I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "give_up_fence.h"
#include "kvstash/proto/codec.h"
#include "kvstash/status.h"

namespace kvstash::client {

using Clock = std::chrono::steady_clock;

// What a request's completion receives.
struct Reply {
  const wire::Envelope* envelope = nullptr;  // verified; valid only during the call
};

// Called exactly once, on the I/O thread (or on the submitting thread when
// the client is already shutting down). Must not throw.
using ReplyHandler = std::function<void(Result<Reply>)>;

// Why a sent Store or Retrieve was given up, as far as its report goes.
enum class GiveUpCause {
  kRequest,     // its deadline, a closed channel, the client destroyed: kvstashd is there
  kLostDaemon,  // the connection was lost: kvstashd's process may be exiting
  kGoodbye,     // kvstashd said it is stopping, once its copies had stopped
};

// What a request is. The session's own requests have kinds of their own, so
// that their errors say why they were sent.
enum class RequestKind : uint8_t {
  kHello,
  kRegisterKV,
  kRegisterAgain,  // a registration sent again to a restarted kvstashd
  kUnregisterKV,
  kUnregisterUnusable,  // a registration the restarted kvstashd cannot use as it was
  kUnregisterLate,      // a registration made again after its request timed out
  kStore,
  kRetrieve,
  kLookup,
  kRelease,
  kClear,
  kDescribe,
  kStats,
  kPing,
  kKeepAlive,      // a Ping sent so that kvstashd does not take the engine for dead
  kPoolReadiness,  // a Ping read for how much of the pool is pinned
  kAttachChannel,
  kCount
};
// The kinds' names in error messages, in enum order.
inline constexpr const char* kRequestKindNames[] = {"Hello",
                                                    "RegisterKV",
                                                    "RegisterKV (again: kvstashd restarted)",
                                                    "UnregisterKV",
                                                    "UnregisterKV (unusable after restart)",
                                                    "UnregisterKV (registered after its timeout)",
                                                    "Store",
                                                    "Retrieve",
                                                    "Lookup",
                                                    "Release",
                                                    "Clear",
                                                    "Describe",
                                                    "Stats",
                                                    "Ping",
                                                    "Ping (keep-alive)",
                                                    "Ping (pool readiness)",
                                                    "AttachChannel"};
static_assert(sizeof(kRequestKindNames) / sizeof(kRequestKindNames[0]) ==
              size_t(RequestKind::kCount));
inline const char* NameOf(RequestKind kind) { return kRequestKindNames[size_t(kind)]; }

struct ClientRequest {
  uint64_t id = 0;
  RequestKind kind = RequestKind::kPing;
  proto::Bytes bytes;  // released once sent
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;
  // Requests naming a registration: the engine's id for it, and the daemon
  // id encoded in `bytes`. The I/O thread rewrites the latter if kvstashd
  // restarted since and the registration got a new daemon id (see IoLoop).
  uint64_t registration_id = 0;
  uint64_t wire_registration_id = 0;
  // The session's own requests (Hello, registering again after a restart):
  // sent before the session is ready; every other request waits for it.
  bool session = false;
  // UnregisterKV: a registration that the restarted daemon does not hold is
  // forgotten here and the request succeeds without being sent.
  bool unregisters = false;
  // Store and Retrieve: kvstashd reads or writes the engine's blocks for
  // them, so a failure is reported only behind the registration's copy
  // fence (`fence`, set when sent), or without one once the deadline passed.
  bool copies_blocks = false;
  std::shared_ptr<GiveUpFence> fence;
  // The failure to report once the fence is ours (or the deadline passed).
  std::optional<Status> giving_up;
  // Why it was given up, as far as its report goes (IoLoop::GiveUp).
  GiveUpCause cause = GiveUpCause::kRequest;
  bool sent = false;
  bool via_ring = false;  // sent through the shared-memory channel
  ReplyHandler on_reply;

  // "request 17 (Store)"
  std::string Name() const { return "request " + std::to_string(id) + " (" + NameOf(kind) + ")"; }
};

}  // namespace kvstash::client
