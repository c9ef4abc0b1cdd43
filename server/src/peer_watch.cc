// Owners of registrations and their silence.
#include "peer_watch.h"

namespace kvstash::server {

void PeerWatch::Heard(const PeerId& peer, Clock::time_point now) {
  recent_[peer] = now;
  auto owner = owners_.find(peer);
  if (owner != owners_.end()) owner->second.last_heard = now;
}

void PeerWatch::Own(const PeerId& peer, uint64_t registration_id, Clock::time_point now) {
  Owner& owner = owners_[peer];
  owner.last_heard = now;
  owner.registration_ids.insert(registration_id);
  owner_of_[registration_id] = peer;
}

void PeerWatch::Disown(uint64_t registration_id) {
  auto found = owner_of_.find(registration_id);
  if (found == owner_of_.end()) return;
  auto owner = owners_.find(found->second);
  owner->second.registration_ids.erase(registration_id);
  if (owner->second.registration_ids.empty()) owners_.erase(owner);
  owner_of_.erase(found);
}

std::vector<PeerWatch::Gone> PeerWatch::TakeGone(Clock::time_point now) {
  std::vector<Gone> gone;
  for (auto it = recent_.begin(); it != recent_.end();) {
    it = now - it->second > kPeerMemory ? recent_.erase(it) : std::next(it);
  }
  if (timeout_.count() == 0) return gone;
  for (auto it = owners_.begin(); it != owners_.end();) {
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_heard);
    if (silent <= timeout_) {
      ++it;
      continue;
    }
    Gone g{it->first,
           silent,
           {it->second.registration_ids.begin(), it->second.registration_ids.end()}};
    for (uint64_t id : g.registration_ids) owner_of_.erase(id);
    gone.push_back(std::move(g));
    it = owners_.erase(it);
  }
  return gone;
}

std::optional<PeerWatch::Clock::time_point> PeerWatch::LastHeard(const PeerId& peer) const {
  auto found = recent_.find(peer);
  if (found == recent_.end()) return std::nullopt;
  return found->second;
}

std::vector<PeerWatch::PeerId> PeerWatch::RecentPeers() const {
  std::vector<PeerId> peers;
  peers.reserve(recent_.size());
  for (const auto& [peer, last_heard] : recent_) peers.push_back(peer);
  return peers;
}

}  // namespace kvstash::server

namespace kvstash::server {

void PeerWatch::Forgive(Clock::duration stall) {
  for (auto& [peer, owner] : owners_) owner.last_heard += stall;
  for (auto& [peer, last_heard] : recent_) last_heard += stall;
}

}  // namespace kvstash::server
