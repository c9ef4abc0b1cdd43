// RegisterKV and UnregisterKV.
#include <string>

#include "daemon_logger.h"
#include "registrations.h"

namespace kvstash::server {

Registrations::Registrations(const config::ServerConfig& config, Stats& stats,
                             DeferredReplies& deferred, Backend& backend, uint64_t max_chunk_bytes,
                             TierChain& tiers, PeerBudget& budget)
    : config_(config),
      stats_(stats),
      deferred_(deferred),
      registry_(std::make_unique<Registry>(backend, config.chunk_tokens, max_chunk_bytes)),
      tiers_(tiers),
      budget_(budget),
      peers_(std::chrono::milliseconds(config.peer_timeout_ms)) {}

Registrations::Reply Registrations::RegisterKV(const Request& r, RegisterRequest& m) {
  if (const size_t held = registry_->CountOwnedBy(r.peer.id);
      held >= config_.max_registrations_per_client) {
    return Status::Exhausted(
        "this client holds " + std::to_string(held) + " registrations; the limit is " +
        std::to_string(config_.max_registrations_per_client) + " (--max-registrations-per-client)");
  }
  // Charged to the peer's process and user before anything is opened: each
  // allocation and the board is a mapping (one per allocation is an upper
  // bound where CUDA IPC shares one), so a peer with many connections meets
  // its bound here, not the kernel's map count later.
  PeerBudget::Amounts cost{};
  cost[PeerBudget::kRegistrations] = 1;
  cost[PeerBudget::kMappings] = m.registration.allocations.size() + (m.registration.board ? 1 : 0);
  Result<PeerBudget::Hold> charged = budget_.Charge(r.peer, cost);
  if (!charged.ok()) {
    Stats::Add(stats_.peer_budget_refusals);
    return charged.status();
  }
  // The backend checks each allocation against what this peer could open.
  for (AllocationSpec& spec : m.registration.allocations) spec.opener = r.peer.credentials;
  Result<std::shared_ptr<Registration>> registered =
      registry_->Register(std::move(m.registration), r.peer.id);
  if (!registered.ok()) return registered.status();
  (*registered)->charge = std::move(*charged);
  Stats::Add(stats_.registrations);
  const Registration& reg = **registered;
  if (!reg.fence_refused.ok()) {
    Logger()->warn(
        "registration {} has no copy fence ({}): its requests are cut off by their "
        "deadlines alone",
        reg.id, reg.fence_refused.message());
  }
  tiers_.AddScope(reg.scope, reg.namespace_id, reg.layout.fingerprint());
  peers_.Own(r.peer.id, (*registered)->id, Clock::now());
  return std::optional<ReplyBody>(RegisterReply{*registered});
}

Registrations::Reply Registrations::UnregisterKV(const Request& r, const UnregisterRequest& m) {
  KVSTASH_RETURN_IF_ERROR(FindRegistration(m.registration_id, r.peer).status());
  KVSTASH_RETURN_IF_ERROR(deferred_.CheckInFlight(r.peer.id));
  std::shared_ptr<Registration> removed = registry_->Remove(m.registration_id);
  if (!removed) return FindRegistration(m.registration_id, r.peer).status();
  Stats::Add(stats_.unregistrations);
  peers_.Disown(removed->id);
  // Queued work finishes first; the reply comes once it has.
  deferred_.Begin(r.peer.id);
  removed->WhenDrained([this, r] { deferred_.Finish(r, UnregisterReply{}); });
  return std::optional<ReplyBody>();
}

Result<std::shared_ptr<Registration>> Registrations::FindRegistration(uint64_t id,
                                                                      const Peer& peer) const {
  std::shared_ptr<Registration> registration = registry_->Find(id);
  if (!registration || registration->owner != peer.id) {
    return Status::NotFound("unknown registration " + std::to_string(id) +
                            " (never registered, unregistered, or the daemon restarted)");
  }
  return registration;
}

void Registrations::DropSilent(Clock::time_point now) {
  for (const PeerWatch::Gone& gone : peers_.TakeGone(now)) {
    for (uint64_t id : gone.registration_ids) {
      // Copies in flight keep it alive until they finish; then its
      // allocations close.
      std::shared_ptr<Registration> removed = registry_->Remove(id);
      if (!removed) continue;
      Stats::Add(stats_.registrations_dropped);
      Logger()->warn(
          "dropped registration {} (model {}): its engine sent nothing for {} ms and "
          "is taken for dead",
          id, removed->request.model, gone.silent.count());
    }
  }
}

}  // namespace kvstash::server
