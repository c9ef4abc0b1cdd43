// The request handlers: turns one decoded request (wire_codec.h: plain
// structs, every field checked) into a plain reply, either at once or, for
// Store, Retrieve and UnregisterKV, later through the reply queue. Owns the daemon's state: backend, L1 pool, chunk store, registry,
// transfer workers and stats.
//
// Handle() runs on the frontend thread only; completions run on transfer
// worker threads and touch only thread-safe members.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "background_worker.h"
#include "chunk_store.h"
#include "kvstash/config/server_config.h"
#include "kvstash/proto/codec.h"
#include "kvstash/stage_trace.h"
#include "l1_pool.h"
#include "peer.h"
#include "peer_watch.h"
#include "registry.h"
#include "reply_queue.h"
#include "stats.h"
#include "transfer_worker.h"
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
  // Answers every request with Unavailable from now on.
  void BeginShutdown() { shutting_down_ = true; }
  // Peers heard from lately, each with the Goodbye to send it (request_id 0)
  // when the daemon stops.
  std::vector<PeerId> RecentPeers() const { return peers_.RecentPeers(); }
  static proto::Bytes GoodbyeMessage(const std::string& reason);
  // Requests whose reply is still to come through the reply queue.
  uint64_t deferred_in_flight() const { return deferred_.load(); }
  // Per-request stage timestamps; null unless KVSTASH_TRACE_FILE is set.
  StageTrace* trace() const { return trace_.get(); }
  // Ends expired leases and, when `socket_drained` (every waiting message
  // was read: silence is judged on what peers sent, not on a backlog),
  // drops the registrations of engines gone silent; called from the
  // frontend's poll loop.
  void Tick(bool socket_drained);
  // The frontend loop did not run for `stall`: nobody's silence.
  void ForgiveStall(Clock::duration stall) { peers_.Forgive(stall); }

  Stats& stats() { return stats_; }
  L1Pool& pool() { return *pool_; }
  // Every registration in detail for an admin; otherwise the viewer's own
  // in detail and the others' count only. Tenant salts and namespace ids
  // never appear.
  std::string DescribeJson(const PeerId& viewer, bool admin) const;
  std::string StatsJson() const;
  // Counters, gauges, histograms and per-registration counters: what
  // StatsJson and the metrics endpoint render. Thread-safe.
  StatsSnapshot ReadStats() const;

 private:
  struct Request {
    Peer peer;
    uint64_t id = 0;
    RequestKind kind = RequestKind::kPing;
    Clock::time_point start;
    std::optional<Clock::time_point> deadline;  // the client's, on the shared monotonic clock
  };
  // An error, a reply now, or nullopt: the reply comes through the queue.
  using Reply = Result<std::optional<ReplyBody>>;

  Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
          ReplyQueue& replies, AccessPolicy access);
  Reply Dispatch(const Request& r, RequestBody& body);
  // service.cc: session and introspection.
  Reply Hello(const Request& r, const HelloRequest& m);
  Reply Clear(const Request& r, const ClearRequest& m);
  Reply Describe(const Request& r);
  Reply StatsReply(const Request& r);
  Reply Ping(const Request& r);
  // handle_registration.cc
  Reply RegisterKV(const Request& r, RegisterRequest& m);
  Reply UnregisterKV(const Request& r, const UnregisterRequest& m);
  // handle_transfer.cc
  Reply Store(const Request& r, StoreRequest& m);
  Reply Retrieve(const Request& r, RetrieveRequest& m);
  // handle_lookup.cc: Lookup and the Release of what it leased.
  Reply Lookup(const Request& r, const LookupRequest& m);
  Reply Release(const Request& r, const ReleaseRequest& m);

  // The registration `id` if `peer` owns it; another connection's is as
  // unknown as one never registered (NotFound, same text).
  Result<std::shared_ptr<Registration>> FindRegistration(uint64_t id, const Peer& peer) const;
  // Checks every chunk's blocks and tokens before any copy.
  Status CheckChunks(const Registration& registration, const std::vector<ChunkRequest>& chunks,
                     bool need_tokens) const;
  // Hands a Store or Retrieve copy to its device's worker; the reply comes
  // through the reply queue.
  Reply SubmitTransfer(Direction direction, TransferJob job);
  // Finishes a request answered later: records latency, pushes the reply.
  void Finish(const Request& request, const ReplyBody& reply);
  void RecordLatency(const Request& request);
  // Per-client count of requests whose reply is still to come.
  // ResourceExhausted once `peer` has --max-in-flight-per-client requests
  // awaiting their reply. Only the frontend adds to the count, so a check
  // here and BeginDeferred later cannot race.
  Status CheckInFlight(const PeerId& peer);
  void BeginDeferred(const PeerId& peer);
  void EndDeferred(const PeerId& peer);

  const config::ServerConfig config_;
  const std::array<uint8_t, 16> boot_id_;
  const Clock::time_point started_;
  Stats stats_;
  std::unique_ptr<StageTrace> trace_;  // before the workers: they mark it until they join
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<L1Pool> pool_;
  std::unique_ptr<ChunkStore> store_;
  std::unique_ptr<Registry> registry_;
  std::vector<std::unique_ptr<TransferWorker>> workers_;  // one per device
  // Clear, Describe and Stats; declared after what they use, so it joins first.
  std::unique_ptr<BackgroundWorker> background_;
  ReplyQueue& replies_;
  std::atomic<uint64_t> deferred_{0};
  std::atomic<uint64_t> introspecting_{0};  // Clear, Describe and Stats among deferred_
  PeerWatch peers_;  // frontend thread only
  AccessPolicy access_;
  std::mutex in_flight_mutex_;
  std::unordered_map<PeerId, uint32_t> in_flight_;  // GUARDED_BY(in_flight_mutex_)
  bool shutting_down_ = false;
};

}  // namespace kvstash::server
