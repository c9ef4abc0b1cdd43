// The introspection part of the service: Hello and Ping, answered at once,
// and Clear, Describe and Stats, which take time in proportion to the
// stored chunks or registrations and run on a background worker. Also the
// documents the metrics endpoint renders.
//
// Handlers run on the frontend thread; the documents are built on the
// background worker (or the metrics thread) from thread-safe state.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "chunk_store.h"
#include "kvstash/backends/backend.h"
#include "kvstash/runtime/work_queue.h"
#include "l1_pool.h"
#include "registrations.h"
#include "requests.h"
#include "tier_chain.h"

namespace kvstash::server {

class Introspection {
 public:
  using Reply = HandlerReply;

  Introspection(const config::ServerConfig& config, Stats& stats, DeferredReplies& deferred,
                const Backend& backend, const L1Pool& pool, ChunkStore& store,
                const TierChain& tiers, const Registrations& registrations, AccessPolicy access);
  ~Introspection();  // joins the background worker

  Reply Hello(const Request& r, const HelloRequest& m);
  Reply Clear(const Request& r, const ClearRequest& m);
  Reply Describe(const Request& r);
  Reply StatsReply(const Request& r);
  Reply Ping(const Request& r);

  // Every registration in detail for an admin; otherwise the viewer's own
  // in detail and the others' count only. Tenant salts and namespace ids
  // never appear.
  std::string DescribeJson(const PeerId& viewer, bool admin) const;
  // The same rule for the per-registration counters.
  std::string StatsJson(const PeerId& viewer, bool admin) const;
  // Counters, gauges, histograms and per-registration counters: what
  // StatsJson and the metrics endpoint render. Thread-safe.
  StatsSnapshot ReadStats() const;

 private:
  // On the background worker: answers `r` with what `build` makes, or with
  // ResourceExhausted when memory runs out meanwhile (std::bad_alloc), which
  // must never end the daemon.
  void Answer(const Request& r, const std::function<ReplyBody()>& build);

  const config::ServerConfig& config_;
  const std::array<uint8_t, 16> boot_id_;
  const Clock::time_point started_;
  Stats& stats_;
  DeferredReplies& deferred_;
  const Backend* backend_;
  const L1Pool* pool_;
  ChunkStore* store_;
  const TierChain* tiers_;
  const Registry* registry_;
  AccessPolicy access_;
  std::atomic<uint64_t> introspecting_{0};  // Clear, Describe and Stats among the deferred
  // Declared last, so it joins before what it uses goes.
  std::unique_ptr<runtime::WorkQueue> background_;
};

}  // namespace kvstash::server
