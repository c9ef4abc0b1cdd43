// What every part of the service shares about a request: the request as the
// frontend read it, the form of a handler's answer, and the replies that
// come later through the reply queue (Store, Retrieve, UnregisterKV, and the
// introspection built on the background worker).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "chunk_store.h"
#include "kvstash/config/server_config.h"
#include "kvstash/runtime/stage_trace.h"
#include "kvstash/runtime/thread_annotations.h"
#include "peer.h"
#include "reply_queue.h"
#include "stats.h"
#include "wire_codec.h"

namespace kvstash::server {

struct Request {
  Peer peer;
  uint64_t id = 0;
  RequestKind kind = RequestKind::kPing;
  Clock::time_point start;
  std::optional<Clock::time_point> deadline;  // the client's, on the shared monotonic clock
};

// An error, a reply now, or nullopt: the reply comes through the queue.
using HandlerReply = Result<std::optional<ReplyBody>>;

// Replies answered later, and the per-client count of them.
// Thread-safe: the frontend begins, any thread finishes.
class DeferredReplies {
 public:
  // `trace` (null unless KVSTASH_TRACE_FILE is set) must outlive this.
  DeferredReplies(const config::ServerConfig& config, Stats& stats, ReplyQueue& replies,
                  StageTrace* trace)
      : config_(config), stats_(stats), replies_(replies), trace_(trace) {}

  // ResourceExhausted once `peer` has --max-in-flight-per-client requests
  // awaiting their reply. Only the frontend adds to the count, so a check
  // here and Begin later cannot race.
  Status CheckInFlight(const PeerId& peer);
  void Begin(const PeerId& peer);
  // Finishes a request answered later: records latency, pushes the reply.
  void Finish(const Request& request, const ReplyBody& reply);
  // Finishes it with an error reply instead.
  void Fail(const Request& request, const Status& status);
  void RecordLatency(const Request& request);
  // Requests whose reply is still to come.
  uint64_t count() const { return deferred_.load(); }
  // Per-request stage timestamps, or null.
  StageTrace* trace() const { return trace_; }

 private:
  void End(const PeerId& peer);

  const config::ServerConfig& config_;
  Stats& stats_;
  ReplyQueue& replies_;
  StageTrace* const trace_;
  std::atomic<uint64_t> deferred_{0};
  Mutex in_flight_mutex_;
  std::unordered_map<PeerId, uint32_t> in_flight_ KVSTASH_GUARDED_BY(in_flight_mutex_);
};

}  // namespace kvstash::server
