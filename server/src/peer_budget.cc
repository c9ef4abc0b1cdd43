// Charging and refunding peers' costs.
#include "peer_budget.h"

#include <algorithm>
#include <fstream>

namespace kvstash::server {

namespace {

constexpr uint64_t kDefaultMaxMapCount = 65530;
// Shared-memory channels attached at once, whoever holds them.
constexpr uint64_t kMaxChannels = 4096;

void Add(PeerBudget::Amounts& to, const PeerBudget::Amounts& amounts) {
  for (size_t i = 0; i < to.size(); ++i) to[i] += amounts[i];
}

// Subtracts and reports whether nothing is left.
bool Subtract(PeerBudget::Amounts& from, const PeerBudget::Amounts& amounts) {
  bool empty = true;
  for (size_t i = 0; i < from.size(); ++i) {
    from[i] -= std::min(from[i], amounts[i]);
    empty = empty && from[i] == 0;
  }
  return empty;
}

const char* OptionOf(PeerBudget::Resource resource, const char* scope) {
  const std::string s = scope;
  switch (resource) {
    case PeerBudget::kRegistrations: return s == "process" ? "--max-registrations-per-process" : "";
    case PeerBudget::kChannels: return s == "process" ? "--max-channels-per-process" : "";
    case PeerBudget::kMappings:
      return s == "user" ? "--max-mappings-per-user" : "half of vm.max_map_count";
    case PeerBudget::kChannelBytes: return s == "user" ? "--max-channel-mb-per-user" : "";
    case PeerBudget::kResourceCount: break;
  }
  return "";
}

}  // namespace

const char* PeerBudget::NameOf(Resource resource) {
  switch (resource) {
    case kRegistrations: return "registrations";
    case kChannels: return "shared-memory channels";
    case kMappings: return "memory mappings";
    case kChannelBytes: return "bytes of shared-memory channels";
    case kResourceCount: break;
  }
  return "?";
}

uint64_t PeerBudget::ReadMaxMapCount() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  uint64_t value = 0;
  if (!(in >> value)) return 0;
  return value;
}

PeerBudget::Limits PeerBudget::LimitsFrom(const config::ServerConfig& config,
                                          uint64_t max_map_count) {
  Limits limits;
  limits.per_process[kRegistrations] = config.max_registrations_per_process;
  limits.per_process[kChannels] = config.max_channels_per_process;
  limits.per_user[kMappings] = config.max_mappings_per_user;
  limits.per_user[kChannelBytes] = uint64_t(config.max_channel_mb_per_user) << 20;
  limits.total[kChannels] = kMaxChannels;
  // The other half is the daemon's own: its pool, threads, allocator.
  limits.total[kMappings] = (max_map_count != 0 ? max_map_count : kDefaultMaxMapCount) / 2;
  return limits;
}

std::string PeerBudget::ProcessKey(const Peer& peer) {
  if (!peer.credentials) return "connection " + peer.id;
  return "process " + std::to_string(peer.credentials->pid) + " of uid " +
         std::to_string(peer.credentials->uid);
}

std::string PeerBudget::UserKey(const Peer& peer) {
  if (!peer.credentials) return "the tcp peers";
  return "uid " + std::to_string(peer.credentials->uid);
}

Result<PeerBudget::Hold> PeerBudget::Charge(const Peer& peer, const Amounts& amounts) {
  Hold hold;
  hold.process_ = ProcessKey(peer);
  hold.user_ = UserKey(peer);
  MutexLock lock(mutex_);
  // Looked up, not inserted: a refused charge leaves no entry behind.
  const auto process = processes_.find(hold.process_);
  const auto user = users_.find(hold.user_);
  const Amounts zero{};
  const Amounts& by_process = process == processes_.end() ? zero : process->second;
  const Amounts& by_user = user == users_.end() ? zero : user->second;
  struct Bound {
    const char* scope;
    const std::string* who;
    const Amounts* held;
    const Amounts* limit;
  };
  const std::string everyone = "all peers together";
  const Bound bounds[] = {{"process", &hold.process_, &by_process, &limits_.per_process},
                          {"user", &hold.user_, &by_user, &limits_.per_user},
                          {"total", &everyone, &total_, &limits_.total}};
  for (const Bound& bound : bounds) {
    for (size_t r = 0; r < kResourceCount; ++r) {
      const uint64_t limit = (*bound.limit)[r];
      const uint64_t held = (*bound.held)[r];
      if (amounts[r] == 0 || limit == kUnbounded) continue;
      if (held > limit || amounts[r] > limit - held) {
        const std::string option = OptionOf(Resource(r), bound.scope);
        return Status::Exhausted(
            *bound.who + " holds " + std::to_string(held) + " " + NameOf(Resource(r)) +
            " and asks for " + std::to_string(amounts[r]) + " more; the limit is " +
            std::to_string(limit) + (option.empty() ? std::string() : " (" + option + ")"));
      }
    }
  }
  Add(processes_[hold.process_], amounts);
  Add(users_[hold.user_], amounts);
  Add(total_, amounts);
  hold.amounts_ = amounts;
  hold.budget_ = this;
  return hold;
}

void PeerBudget::Refund(const Hold& hold) {
  MutexLock lock(mutex_);
  if (auto p = processes_.find(hold.process_);
      p != processes_.end() && Subtract(p->second, hold.amounts_)) {
    processes_.erase(p);
  }
  if (auto u = users_.find(hold.user_); u != users_.end() && Subtract(u->second, hold.amounts_)) {
    users_.erase(u);
  }
  Subtract(total_, hold.amounts_);
}

PeerBudget::Amounts PeerBudget::HeldByProcess(const Peer& peer) const {
  MutexLock lock(mutex_);
  auto found = processes_.find(ProcessKey(peer));
  return found == processes_.end() ? Amounts{} : found->second;
}

PeerBudget::Amounts PeerBudget::HeldByUser(const Peer& peer) const {
  MutexLock lock(mutex_);
  auto found = users_.find(UserKey(peer));
  return found == users_.end() ? Amounts{} : found->second;
}

PeerBudget::Amounts PeerBudget::HeldInTotal() const {
  MutexLock lock(mutex_);
  return total_;
}

PeerBudget::Hold& PeerBudget::Hold::operator=(Hold&& other) noexcept {
  if (this == &other) return *this;
  Release();
  budget_ = other.budget_;
  process_ = std::move(other.process_);
  user_ = std::move(other.user_);
  amounts_ = other.amounts_;
  other.budget_ = nullptr;
  return *this;
}

void PeerBudget::Hold::Release() {
  if (budget_ == nullptr) return;
  budget_->Refund(*this);
  budget_ = nullptr;
}

}  // namespace kvstash::server
