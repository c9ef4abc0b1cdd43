// The engine's live registrations as this client made them, so that it can
// make them again when kvstashd restarts. The engine keeps one id per
// registration for the client's life (the first daemon id it got); each
// daemon boot hands out its own ids, which this table maps to.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "give_up_fence.h"
#include "kvstash/client_types.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"

namespace kvstash::client {

using BootId = std::array<uint8_t, 16>;

// Thread-safe.
class RegistrationTable {
 public:
  // A RegisterKV reply of daemon boot `boot`: remembers it and returns the
  // registration with the id the engine will use.
  // `fence`: the registration's copy fence when the daemon holds it, else
  // null.
  RegisteredKv Add(RegisteredKv registration, RegisterOptions options, const BootId& boot,
                   std::shared_ptr<GiveUpFence> fence);
  // `drained`: its UnregisterKV was answered, so the daemon copies nothing
  // of it any more and its fence may go; otherwise the fence is kept.
  void Remove(uint64_t engine_id, bool drained);
  // The copy fence of engine_id on the daemon it is registered with now
  // (null: none, or not this client's).
  std::shared_ptr<GiveUpFence> Fence(uint64_t engine_id) const;

  // The daemon id to encode for engine_id: itself when this client did not
  // register it (kvstashd judges such ids).
  uint64_t WireId(uint64_t engine_id) const;

  // Where a request naming engine_id must go on boot `boot`: nullopt when
  // this client does not know the id; the daemon id when it was registered
  // on that boot; Unavailable (saying why) when it is not (yet) registered
  // there.
  std::optional<Result<uint64_t>> Resolve(uint64_t engine_id, const BootId& boot) const;

  // The registrations not registered on boot `boot`: to register again.
  struct Stale {
    uint64_t engine_id;
    RegisterOptions options;
  };
  std::vector<Stale> StaleFor(const BootId& boot) const;
  // The outcome of registering engine_id again on `boot`. A registration
  // whose chunk layout or key namespace changed stays unusable: the engine's
  // keys and block math were computed for the old one; it is not tried
  // again, and the daemon id returned is to be unregistered.
  std::optional<uint64_t> Rebound(uint64_t engine_id, const Result<RegisteredKv>& again,
                                  const BootId& boot, std::shared_ptr<GiveUpFence> fence);

 private:
  struct Entry {
    RegisteredKv first;  // as the engine saw it (id = engine id)
    RegisterOptions options;
    uint64_t daemon_id = 0;
    BootId boot{};
    Status last_error;     // why it is not registered on a later boot
    bool retired = false;  // never registered again (configuration changed)
    std::shared_ptr<GiveUpFence> fence;
  };
  mutable Mutex mutex_;
  std::unordered_map<uint64_t, Entry> entries_ KVSTASH_GUARDED_BY(mutex_);  // by engine id
  uint64_t next_private_id_ KVSTASH_GUARDED_BY(mutex_) = 1ull << 63;
  // Fences of earlier daemons: kept, with the requests they gave up, for the
  // client's life, since such a daemon is not known to be gone.
  std::vector<std::shared_ptr<GiveUpFence>> earlier_fences_ KVSTASH_GUARDED_BY(mutex_);
};

}  // namespace kvstash::client
