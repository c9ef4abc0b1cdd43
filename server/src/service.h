// The dispatcher the daemon calls: verifies one message, decodes it
// (wire_codec.h: plain structs, every field checked) and hands it to the
// part of the service that owns its concern:
//   registrations.h  RegisterKV, UnregisterKV, the registry, peers' silence
//   leases.h         Lookup and Release
//   transfers.h      Store and Retrieve, the transfer workers
//   introspection.h  Hello, Ping, Clear, Describe, Stats
// A reply comes at once or, for Store, Retrieve, UnregisterKV and the
// introspection built in the background, later through the reply queue.
// Owns what the parts share: backend, L1 pool, chunk store, the tiers below
// L1 (tier_chain.h) and stats.
//
// Handle() runs on the frontend thread only; completions run on transfer
// worker threads and touch only thread-safe members.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chunk_store.h"
#include "introspection.h"
#include "kvstash/backends/backend.h"
#include "kvstash/config/server_config.h"
#include "kvstash/proto/codec.h"
#include "kvstash/runtime/stage_trace.h"
#include "l1_pool.h"
#include "leases.h"
#include "peer.h"
#include "peer_budget.h"
#include "registrations.h"
#include "reply_queue.h"
#include "requests.h"
#include "stats.h"
#include "tier_chain.h"
#include "transfers.h"
#include "wire_codec.h"

namespace kvstash::server {

class Service {
 public:
  static Result<std::unique_ptr<Service>> Create(const config::ServerConfig& config,
                                                 std::unique_ptr<Backend> backend,
                                                 ReplyQueue& replies);
  ~Service();

  // One message, verified and handled: its reply now; none yet (it comes
  // through the reply queue); or, for an AttachChannel, the request for the
  // frontend to answer (docs/protocol.md "Shared-memory channel": the
  // frontend owns the channels). Memory running out while handling it
  // (std::bad_alloc) is answered ResourceExhausted: the request edge is
  // where a limit is met, never the daemon's end.
  struct Handled {
    std::optional<proto::Bytes> reply;
    std::optional<AttachChannelRequest> attach;
    uint64_t request_id = 0;
  };
  Handled Accept(const Peer& peer, const uint8_t* data, size_t size);
  // Accept for a caller without channels: an AttachChannel is refused.
  std::optional<proto::Bytes> Handle(const Peer& peer, const uint8_t* data, size_t size);
  // Answers every request with Unavailable from now on, and starts no copy
  // unit any more (docs/protocol.md "The copy fence"): wait for
  // copies_in_flight() to reach 0 before saying Goodbye.
  void BeginShutdown();
  uint64_t copies_in_flight() const;
  // Peers heard from lately, each with the Goodbye to send it (request_id 0)
  // when the daemon stops.
  std::vector<PeerId> RecentPeers() const { return registrations_->RecentPeers(); }
  // Requests whose reply is still to come through the reply queue.
  uint64_t deferred_in_flight() const { return deferred_.count(); }
  // Those of them whose reply may come at any moment: not the stores waiting
  // for their engine to open a gate, which it may never do before their
  // deadline (docs/protocol.md "GPU-side completion"). The frontend spins
  // for these only. Frontend thread.
  uint64_t replies_due() const;
  // Per-request stage timestamps; null unless KVSTASH_TRACE_FILE is set.
  StageTrace* trace() const { return trace_.get(); }
  // Ends expired leases and, when `socket_drained` (every waiting message
  // was read: silence is judged on what peers sent, not on a backlog),
  // drops the registrations of engines gone silent; called from the
  // frontend's poll loop.
  void Tick(bool socket_drained);
  // How long `peer` has been silent (frontend thread); nullopt when it was
  // not heard from lately or silence is never judged (--peer-timeout-ms 0).
  std::optional<Clock::duration> SilentFor(const PeerId& peer, Clock::time_point now) const {
    if (config_.peer_timeout_ms == 0) return std::nullopt;
    const std::optional<Clock::time_point> heard = registrations_->LastHeard(peer);
    if (!heard) return Clock::duration::max();  // forgotten: silent past kPeerMemory
    return now - *heard;
  }
  // The frontend loop did not run for `stall`: nobody's silence.
  void ForgiveStall(Clock::duration stall) { registrations_->ForgiveStall(stall); }

  Stats& stats() { return stats_; }
  // What each peer holds (registrations here, channels in the frontend).
  PeerBudget& budget() { return *budget_; }
  // Every registration in detail for an admin; otherwise the viewer's own
  // in detail and the others' count only. Tenant salts and namespace ids
  // never appear.
  std::string DescribeJson(const PeerId& viewer, bool admin) const {
    return introspection_->DescribeJson(viewer, admin);
  }
  std::string StatsJson(const PeerId& viewer, bool admin) const {
    return introspection_->StatsJson(viewer, admin);
  }
  // Counters, gauges, histograms and per-registration counters: what
  // StatsJson and the metrics endpoint render. Thread-safe.
  StatsSnapshot ReadStats() const { return introspection_->ReadStats(); }

 private:
  using Reply = HandlerReply;

  Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
          ReplyQueue& replies);
  Reply Dispatch(const Request& r, RequestBody& body);
  Handled HandleMessage(const Peer& peer, const uint8_t* data, size_t size, uint64_t* request_id);

  const config::ServerConfig config_;
  Stats stats_;
  std::unique_ptr<StageTrace> trace_;  // before the workers: they mark it until they join
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<L1Pool> pool_;
  std::unique_ptr<ChunkStore> store_;
  // L2 and L3; drained first on the way down (~Service), while the store
  // and the parts its callbacks reach still stand.
  std::unique_ptr<TierChain> tiers_;
  DeferredReplies deferred_;
  // Before the parts: registrations give their charge back when the last
  // holder (a worker, a lease) lets them go.
  std::unique_ptr<PeerBudget> budget_;
  // The parts, declared after what they share so they go first (their
  // workers join while the pool and store still stand).
  std::unique_ptr<Registrations> registrations_;
  std::unique_ptr<Leases> leases_;
  std::unique_ptr<Transfers> transfers_;
  std::unique_ptr<Introspection> introspection_;
  bool shutting_down_ = false;
};

}  // namespace kvstash::server
