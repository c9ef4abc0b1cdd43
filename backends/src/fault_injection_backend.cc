// Faults at chosen copies.
#include "kvstash/backends/fault_injection_backend.h"

#include <unistd.h>

#include <thread>

namespace kvstash::backends {

void FaultInjectionBackend::AddRule(FaultRule rule) {
  MutexLock lock(mutex_);
  rules_.push_back(ActiveRule{std::move(rule), 0});
}

void FaultInjectionBackend::ClearRules() {
  MutexLock lock(mutex_);
  rules_.clear();
}

uint64_t FaultInjectionBackend::copies(Direction direction) const {
  return (direction == Direction::kStore ? store_copies_ : retrieve_copies_).load();
}

std::optional<FaultRule> FaultInjectionBackend::Match(Direction direction) {
  MutexLock lock(mutex_);
  std::optional<FaultRule> fired;
  for (ActiveRule& active : rules_) {
    if (active.rule.direction && *active.rule.direction != direction) continue;
    ++active.seen;
    const bool fires = active.rule.nth_copy == 0 || active.seen == active.rule.nth_copy;
    if (fires && !fired) fired = active.rule;
  }
  return fired;
}

Status FaultInjectionBackend::Copy(Direction direction, int device, const CopyLayout& layout,
                                   const std::vector<kernels::ChunkCopy>& chunks,
                                   const std::vector<uint32_t>& slabs, CopyDeadlines& deadlines,
                                   const CopySignal* signal) {
  (direction == Direction::kStore ? store_copies_ : retrieve_copies_).fetch_add(1);
  const std::optional<FaultRule> rule = Match(direction);
  if (!rule) return real_->Copy(direction, device, layout, chunks, slabs, deadlines, signal);
  switch (rule->action) {
    case FaultRule::Action::kStall:
      std::this_thread::sleep_for(rule->stall);
      return real_->Copy(direction, device, layout, chunks, slabs, deadlines, signal);
    case FaultRule::Action::kDie: _exit(86);  // [[noreturn]]
    case FaultRule::Action::kFail: {
      const size_t before = std::min<size_t>(rule->chunk_index, chunks.size());
      if (before > 0) {
        const std::vector<kernels::ChunkCopy> partial(chunks.begin(),
                                                      chunks.begin() + long(before));
        const std::vector<uint32_t> partial_slabs(slabs.begin(), slabs.begin() + long(before));
        CopyDeadlines partial_deadlines;
        if (!deadlines.at.empty()) {
          partial_deadlines.at.assign(deadlines.at.begin(), deadlines.at.begin() + long(before));
        }
        partial_deadlines.stopping = deadlines.stopping;
        // No signal: the transfer worker releases the slots of a failed copy.
        KVSTASH_RETURN_IF_ERROR(real_->Copy(direction, device, layout, partial, partial_slabs,
                                            partial_deadlines, nullptr));
        deadlines.missed.assign(chunks.size(), 0);
        std::copy(partial_deadlines.missed.begin(), partial_deadlines.missed.end(),
                  deadlines.missed.begin());
      }
      return rule->error;
    }
  }
  return rule->error;
}

}  // namespace kvstash::backends
