// The request handlers: turns one verified request into a reply, either at
// once or, for Store, Retrieve and UnregisterKV, later through the reply
// queue. Owns the daemon's state: backend, L1 pool, chunk store, registry,
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
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "chunk_store.h"
#include "kvstash/config/server_config.h"
#include "kvstash/proto/codec.h"
#include "l1_pool.h"
#include "peer_watch.h"
#include "registry.h"
#include "reply_queue.h"
#include "stats.h"
#include "transfer_worker.h"

namespace kvstash::server {

class Service {
 public:
  static Result<std::unique_ptr<Service>> Create(const config::ServerConfig& config,
                                                 std::unique_ptr<Backend> backend,
                                                 ReplyQueue& replies);
  ~Service();

  // Verifies and handles one message; returns the reply now, or nullopt when
  // it will come through the reply queue.
  std::optional<proto::Bytes> Handle(const PeerId& peer, const uint8_t* data, size_t size);
  // Answers every request with Unavailable from now on.
  void BeginShutdown() { shutting_down_ = true; }
  // Peers heard from lately, each with the Goodbye to send it (request_id 0)
  // when the daemon stops.
  std::vector<PeerId> RecentPeers() const { return peers_.RecentPeers(); }
  static proto::Bytes GoodbyeMessage(const std::string& reason);
  // Requests whose reply is still to come through the reply queue.
  uint64_t deferred_in_flight() const { return deferred_.load(); }
  // Ends expired leases and drops the registrations of engines gone
  // silent; called from the frontend's poll loop.
  void Tick();

  Stats& stats() { return stats_; }
  L1Pool& pool() { return *pool_; }
  std::string DescribeJson() const;
  std::string StatsJson() const;
  // Counters, gauges, histograms and per-registration counters: what
  // StatsJson and the metrics endpoint render. Thread-safe.
  StatsSnapshot ReadStats() const;

 private:
  struct Request {
    PeerId peer;
    uint64_t id = 0;
    RequestKind kind = RequestKind::kPing;
    Clock::time_point start;
  };
  using Reply = Result<std::optional<proto::Bytes>>;  // error, now, or deferred

  Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
          ReplyQueue& replies);
  Reply Dispatch(Request& request, const wire::Envelope& envelope);
  Reply Hello(const Request& r, const wire::HelloRequest& m);
  Reply RegisterKV(const Request& r, const wire::RegisterKVRequest& m);
  Reply UnregisterKV(const Request& r, const wire::UnregisterKVRequest& m);
  Reply Store(const Request& r, const wire::StoreRequest& m);
  Reply Retrieve(const Request& r, const wire::RetrieveRequest& m);
  Reply Lookup(const Request& r, const wire::LookupRequest& m);
  Reply Release(const Request& r, const wire::ReleaseRequest& m);
  Reply Clear(const Request& r, const wire::ClearRequest& m);
  Reply Describe(const Request& r);
  Reply StatsReply(const Request& r);
  Reply Ping(const Request& r);

  Result<std::shared_ptr<Registration>> FindRegistration(uint64_t id) const;
  // Checks a chunk list's size and every block id before any copy.
  Status CheckChunks(const Registration& registration,
                     const flatbuffers::Vector<flatbuffers::Offset<wire::ChunkBlocks>>* chunks,
                     bool need_tokens) const;
  // Hands a Store or Retrieve copy to its device's worker; the reply comes
  // through the reply queue.
  Reply SubmitTransfer(Direction direction, TransferJob job);
  // Finishes a request answered later: records latency, pushes the reply.
  void Finish(const Request& request, proto::Bytes bytes);
  void RecordLatency(const Request& request);

  const config::ServerConfig config_;
  const std::array<uint8_t, 16> boot_id_;
  const Clock::time_point started_;
  Stats stats_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<L1Pool> pool_;
  std::unique_ptr<ChunkStore> store_;
  std::unique_ptr<Registry> registry_;
  std::vector<std::unique_ptr<TransferWorker>> workers_;  // one per device
  ReplyQueue& replies_;
  std::atomic<uint64_t> deferred_{0};
  PeerWatch peers_;  // frontend thread only
  bool shutting_down_ = false;
};

}  // namespace kvstash::server
