// What one peer may make the daemon hold, charged to who the peer is, not
// to its connection: connections cost a client nothing to open, so a bound
// per connection bounds nothing. An ipc peer is its process (uid, pid, from
// SO_PEERCRED) and its user (uid); a tcp peer, which has no credentials, is
// its connection, and all tcp peers together are one user.
//
// Registrations and shared-memory channels take a charge when made and give
// it back when they go (PeerBudget::Hold, whoever destroys it last). Each
// resource is bounded per process, per user and in total; past any bound
// the charge is refused (ResourceExhausted naming the bound and the option
// that sets it), never made and found wanting later. The total of mappings
// stays under half the kernel's vm.max_map_count, so the daemon itself
// always has mappings left to allocate with.
//
// Thread-safe: charged on the frontend, refunded on any thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "kvstash/config/server_config.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"
#include "peer.h"

namespace kvstash::server {

class PeerBudget {
 public:
  enum Resource : size_t {
    kRegistrations,  // registrations held
    kChannels,       // shared-memory channels attached
    kMappings,       // memory maps the daemon holds for the peer (allocations, boards, channels)
    kChannelBytes,   // bytes of channel segments mapped (the daemon writes reply rings)
    kResourceCount,
  };
  using Amounts = std::array<uint64_t, kResourceCount>;
  static constexpr uint64_t kUnbounded = ~uint64_t{0};

  struct Limits {
    Amounts per_process{kUnbounded, kUnbounded, kUnbounded, kUnbounded};
    Amounts per_user{kUnbounded, kUnbounded, kUnbounded, kUnbounded};
    Amounts total{kUnbounded, kUnbounded, kUnbounded, kUnbounded};
  };
  // From the options, and the total of mappings from `max_map_count`
  // (vm.max_map_count; 0: unknown, then 65530, the kernel's default).
  static Limits LimitsFrom(const config::ServerConfig& config, uint64_t max_map_count);
  // vm.max_map_count as the kernel says it, or 0.
  static uint64_t ReadMaxMapCount();

  explicit PeerBudget(const Limits& limits) : limits_(limits) {}
  PeerBudget(const PeerBudget&) = delete;
  PeerBudget& operator=(const PeerBudget&) = delete;

  // A charge held; given back when destroyed. Empty when default-made.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept { *this = std::move(other); }
    Hold& operator=(Hold&& other) noexcept;
    ~Hold() { Release(); }
    const Amounts& amounts() const { return amounts_; }

   private:
    friend class PeerBudget;
    void Release();
    PeerBudget* budget_ = nullptr;
    std::string process_;
    std::string user_;
    Amounts amounts_{};
  };

  // Charges `amounts` to `peer`'s process and user, or refuses all of it.
  Result<Hold> Charge(const Peer& peer, const Amounts& amounts);

  // What `peer`'s process and user hold now (tests, Describe).
  Amounts HeldByProcess(const Peer& peer) const;
  Amounts HeldByUser(const Peer& peer) const;
  Amounts HeldInTotal() const;
  const Limits& limits() const { return limits_; }

  static const char* NameOf(Resource resource);

 private:
  static std::string ProcessKey(const Peer& peer);
  static std::string UserKey(const Peer& peer);
  void Refund(const Hold& hold);

  const Limits limits_;
  mutable Mutex mutex_;
  std::map<std::string, Amounts> processes_ KVSTASH_GUARDED_BY(mutex_);
  std::map<std::string, Amounts> users_ KVSTASH_GUARDED_BY(mutex_);
  Amounts total_ KVSTASH_GUARDED_BY(mutex_){};
};

}  // namespace kvstash::server
