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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "chunk_store.h"
#include "introspection.h"
#include "kvstash/config/server_config.h"
#include "kvstash/proto/codec.h"
#include "kvstash/stage_trace.h"
#include "l1_pool.h"
#include "leases.h"
#include "peer.h"
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

  // Verifies and handles one message; returns the reply now, or nullopt when
  // it will come through the reply queue.
  std::optional<proto::Bytes> Handle(const Peer& peer, const uint8_t* data, size_t size);
  // AttachChannel (docs/protocol.md "Shared-memory channel") is the
  // frontend's: it owns the channels. Set before serving; absent, the
  // request is refused.
  // It returns the doorbell's path ("" for none) for AttachChannelReply.
  using ChannelAttacher = std::function<Result<std::string>(
      const Peer& peer, const wire::AttachChannelRequest& request)>;
  void SetChannelAttacher(ChannelAttacher attacher) { attach_channel_ = std::move(attacher); }
  // Answers every request with Unavailable from now on, and starts no copy
  // unit any more (docs/protocol.md "The copy fence"): wait for
  // copies_in_flight() to reach 0 before saying Goodbye.
  void BeginShutdown();
  uint64_t copies_in_flight() const;
  // Peers heard from lately, each with the Goodbye to send it (request_id 0)
  // when the daemon stops.
  std::vector<PeerId> RecentPeers() const { return registrations_->RecentPeers(); }
  static proto::Bytes GoodbyeMessage(const std::string& reason);
  // Requests whose reply is still to come through the reply queue.
  uint64_t deferred_in_flight() const { return deferred_.count(); }
  // Per-request stage timestamps; null unless KVSTASH_TRACE_FILE is set.
  StageTrace* trace() const { return trace_.get(); }
  // Ends expired leases and, when `socket_drained` (every waiting message
  // was read: silence is judged on what peers sent, not on a backlog),
  // drops the registrations of engines gone silent; called from the
  // frontend's poll loop.
  void Tick(bool socket_drained);
  // The frontend loop did not run for `stall`: nobody's silence.
  void ForgiveStall(Clock::duration stall) { registrations_->ForgiveStall(stall); }

  Stats& stats() { return stats_; }
  L1Pool& pool() { return *pool_; }
  // Every registration in detail for an admin; otherwise the viewer's own
  // in detail and the others' count only. Tenant salts and namespace ids
  // never appear.
  std::string DescribeJson(const PeerId& viewer, bool admin) const {
    return introspection_->DescribeJson(viewer, admin);
  }
  std::string StatsJson() const { return introspection_->StatsJson(); }
  // Counters, gauges, histograms and per-registration counters: what
  // StatsJson and the metrics endpoint render. Thread-safe.
  StatsSnapshot ReadStats() const { return introspection_->ReadStats(); }

 private:
  using Reply = HandlerReply;

  Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
          ReplyQueue& replies);
  Reply Dispatch(const Request& r, RequestBody& body);

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
  // The parts, declared after what they share so they go first (their
  // workers join while the pool and store still stand).
  std::unique_ptr<Registrations> registrations_;
  std::unique_ptr<Leases> leases_;
  std::unique_ptr<Transfers> transfers_;
  std::unique_ptr<Introspection> introspection_;
  ChannelAttacher attach_channel_;
  bool shutting_down_ = false;
};

}  // namespace kvstash::server
