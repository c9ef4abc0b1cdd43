// RegisterKV and UnregisterKV.
#include <string>

#include "service.h"

namespace kvstash::server {

Service::Reply Service::RegisterKV(const Request& r, RegisterRequest& m) {
  if (const size_t held = registry_->CountOwnedBy(r.peer.id);
      held >= config_.max_registrations_per_client) {
    return Status::Exhausted("this client holds " + std::to_string(held) +
                             " registrations; the limit is " +
                             std::to_string(config_.max_registrations_per_client) +
                             " (--max-registrations-per-client)");
  }
  // The backend checks each allocation against what this peer could open.
  for (AllocationSpec& spec : m.registration.allocations) spec.opener = r.peer.credentials;
  Result<std::shared_ptr<Registration>> registered =
      registry_->Register(std::move(m.registration), r.peer.id);
  if (!registered.ok()) return registered.status();
  Stats::Add(stats_.registrations);
  peers_.Own(r.peer.id, (*registered)->id, Clock::now());
  return std::optional<ReplyBody>(RegisterReply{*registered});
}

Service::Reply Service::UnregisterKV(const Request& r, const UnregisterRequest& m) {
  KVSTASH_RETURN_IF_ERROR(FindRegistration(m.registration_id, r.peer).status());
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));
  std::shared_ptr<Registration> removed = registry_->Remove(m.registration_id);
  if (!removed) return FindRegistration(m.registration_id, r.peer).status();
  Stats::Add(stats_.unregistrations);
  peers_.Disown(removed->id);
  // Queued work finishes first; the reply comes once it has.
  BeginDeferred(r.peer.id);
  removed->WhenDrained([this, r] { Finish(r, UnregisterReply{}); });
  return std::optional<ReplyBody>();
}

}  // namespace kvstash::server
