// Which connection owns which registrations, and when each was last heard
// from. An engine that dies (SIGKILL, OOM, a crashed container) never sends
// UnregisterKV, yet its registrations hold its shared memory and CUDA IPC
// allocations open in the daemon: GPU memory the driver cannot give back
// until the daemon closes it. libkvstash sends a Ping at a quarter of the
// timeout when it has nothing else to send, so an owner silent for the
// whole timeout is gone, and its registrations are dropped.
//
// Silence is the peer's, not the daemon's: time the frontend loop itself did
// not run is forgiven (Forgive), and the frontend judges silence only after
// it has read every message waiting on its socket.
//
// Frontend thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvstash::server {

class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  using PeerId = std::string;

  // timeout 0: owners are never considered gone.
  explicit PeerWatch(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // Any message from `peer`.
  void Heard(const PeerId& peer, Clock::time_point now);
  void Own(const PeerId& peer, uint64_t registration_id, Clock::time_point now);
  void Disown(uint64_t registration_id);
  // Registrations of owners silent for longer than the timeout; they are
  // forgotten here.
  struct Gone {
    PeerId peer;
    std::chrono::milliseconds silent;
    std::vector<uint64_t> registration_ids;
  };
  std::vector<Gone> TakeGone(Clock::time_point now);
  // The daemon itself did not run for `stall` (stopped, or busy in one
  // request): no one could have been heard then, so it does not count as
  // anyone's silence.
  void Forgive(Clock::duration stall);

  // Every peer heard from within kPeerMemory (registered or not): whom the
  // daemon tells Goodbye when it stops.
  std::vector<PeerId> RecentPeers() const;
  // When `peer` was last heard from (stalls forgiven), if within kPeerMemory.
  std::optional<Clock::time_point> LastHeard(const PeerId& peer) const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  static constexpr std::chrono::minutes kPeerMemory{10};

 private:
  struct Owner {
    Clock::time_point last_heard;
    std::set<uint64_t> registration_ids;
  };
  const std::chrono::milliseconds timeout_;
  std::unordered_map<PeerId, Owner> owners_;
  std::unordered_map<uint64_t, PeerId> owner_of_;
  std::unordered_map<PeerId, Clock::time_point> recent_;  // last heard, pruned in TakeGone
};

}  // namespace kvstash::server
