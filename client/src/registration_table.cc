// The engine's registrations across daemon restarts.
#include "registration_table.h"

#include <string>
#include <utility>

namespace kvstash::client {

RegisteredKv RegistrationTable::Add(RegisteredKv registration, RegisterOptions options,
                                    const BootId& boot, std::shared_ptr<GiveUpFence> fence) {
  MutexLock lock(mutex_);
  const uint64_t daemon_id = registration.id;
  // A later boot may hand out an id the engine already holds for another
  // registration: give the new one a private id instead.
  uint64_t engine_id = daemon_id;
  while (engine_id == 0 || entries_.count(engine_id) != 0) engine_id = next_private_id_++;
  registration.id = engine_id;
  entries_[engine_id] = Entry{registration, std::move(options), daemon_id, boot, Status::Ok(),
                              false,        std::move(fence)};
  return registration;
}

void RegistrationTable::Remove(uint64_t engine_id, bool drained) {
  MutexLock lock(mutex_);
  auto it = entries_.find(engine_id);
  if (it == entries_.end()) return;
  if (!drained && it->second.fence) earlier_fences_.push_back(std::move(it->second.fence));
  entries_.erase(it);
}

std::shared_ptr<GiveUpFence> RegistrationTable::Fence(uint64_t engine_id) const {
  MutexLock lock(mutex_);
  auto it = entries_.find(engine_id);
  return it == entries_.end() ? nullptr : it->second.fence;
}

uint64_t RegistrationTable::WireId(uint64_t engine_id) const {
  MutexLock lock(mutex_);
  auto it = entries_.find(engine_id);
  return it == entries_.end() ? engine_id : it->second.daemon_id;
}

std::optional<Result<uint64_t>> RegistrationTable::Resolve(uint64_t engine_id,
                                                           const BootId& boot) const {
  MutexLock lock(mutex_);
  auto it = entries_.find(engine_id);
  if (it == entries_.end()) return std::nullopt;
  if (it->second.boot == boot) return Result<uint64_t>(it->second.daemon_id);
  return Result<uint64_t>(Status::Unavailable(
      "registration " + std::to_string(engine_id) +
      " is not registered with the restarted kvstashd: " +
      (it->second.last_error.ok() ? std::string("registering it again is under way")
                                  : it->second.last_error.ToString())));
}

std::vector<RegistrationTable::Stale> RegistrationTable::StaleFor(const BootId& boot) const {
  MutexLock lock(mutex_);
  std::vector<Stale> stale;
  for (const auto& [engine_id, entry] : entries_) {
    if (entry.boot != boot && !entry.retired) stale.push_back({engine_id, entry.options});
  }
  return stale;
}

std::optional<uint64_t> RegistrationTable::Rebound(uint64_t engine_id,
                                                   const Result<RegisteredKv>& again,
                                                   const BootId& boot,
                                                   std::shared_ptr<GiveUpFence> fence) {
  MutexLock lock(mutex_);
  auto it = entries_.find(engine_id);
  if (it == entries_.end()) return again.ok() ? std::optional<uint64_t>(again->id) : std::nullopt;
  Entry& entry = it->second;
  if (entry.fence) earlier_fences_.push_back(std::move(entry.fence));
  entry.fence = nullptr;
  if (!again.ok()) {
    entry.last_error = again.status();
    return std::nullopt;
  }
  const RegisteredKv& first = entry.first;
  std::string changed;
  if (again->chunk_tokens != first.chunk_tokens) {
    changed = "chunk_tokens " + std::to_string(first.chunk_tokens) + " -> " +
              std::to_string(again->chunk_tokens);
  } else if (again->chunk_bytes != first.chunk_bytes) {
    changed = "chunk_bytes " + std::to_string(first.chunk_bytes) + " -> " +
              std::to_string(again->chunk_bytes);
  } else if (again->namespace_id != first.namespace_id) {
    changed = "the key namespace";
  } else if (again->layout_fingerprint != first.layout_fingerprint) {
    changed = "the layout fingerprint";
  }
  if (!changed.empty()) {
    entry.last_error = Status::Unavailable(
        "kvstashd restarted with another configuration (" + changed +
        "), so this registration's keys no longer apply; unregister it and register again");
    entry.retired = true;
    return again->id;
  }
  entry.daemon_id = again->id;
  entry.boot = boot;
  entry.fence = std::move(fence);
  entry.last_error = Status::Ok();
  return std::nullopt;
}

}  // namespace kvstash::client
