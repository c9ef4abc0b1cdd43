// The registrations part of the service: RegisterKV and UnregisterKV, the
// registry, and which connection owns which registration (PeerWatch), so
// the registrations of an engine gone silent are dropped.
//
// Register, Unregister, Heard and DropSilent run on the frontend thread;
// FindRegistration is thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "kvstash/backends/backend.h"
#include "peer_watch.h"
#include "registry.h"
#include "requests.h"
#include "tier_chain.h"

namespace kvstash::server {

class Registrations {
 public:
  using Reply = HandlerReply;

  Registrations(const config::ServerConfig& config, Stats& stats, DeferredReplies& deferred,
                Backend& backend, uint64_t max_chunk_bytes, TierChain& tiers, PeerBudget& budget);

  Reply RegisterKV(const Request& r, RegisterRequest& m);
  Reply UnregisterKV(const Request& r, const UnregisterRequest& m);

  // The registration `id` if `peer` owns it; another connection's is as
  // unknown as one never registered (NotFound, same text).
  Result<std::shared_ptr<Registration>> FindRegistration(uint64_t id, const Peer& peer) const;

  // Any message from `peer`.
  void Heard(const PeerId& peer, Clock::time_point now) { peers_.Heard(peer, now); }
  // When `peer` was last heard from (frontend thread), if lately.
  std::optional<Clock::time_point> LastHeard(const PeerId& peer) const {
    return peers_.LastHeard(peer);
  }
  // Drops the registrations of engines gone silent.
  void DropSilent(Clock::time_point now);
  // The frontend loop did not run for `stall`: nobody's silence.
  void ForgiveStall(Clock::duration stall) { peers_.Forgive(stall); }
  std::vector<PeerId> RecentPeers() const { return peers_.RecentPeers(); }

  Registry& registry() { return *registry_; }
  const Registry& registry() const { return *registry_; }

 private:
  const config::ServerConfig& config_;
  Stats& stats_;
  DeferredReplies& deferred_;
  std::unique_ptr<Registry> registry_;
  TierChain& tiers_;  // told each registration's scope
  PeerBudget& budget_;
  PeerWatch peers_;  // frontend thread only
};

}  // namespace kvstash::server
