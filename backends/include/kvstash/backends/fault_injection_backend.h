// A backend that wraps a real one and makes its copies fail, stall or die at
// chosen points: leveldb's FaultInjectionTestEnv for engine memory. Tests
// put it under a Service to show that failures come back per chunk, that a
// failed store is never visible, that a stalled copy still gets exactly one
// reply, and that nothing stale is served after a failed copy.
// Thread-safe: rules may change while copies run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kvstash/backends/backend.h"
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::backends {

struct FaultRule {
  enum class Action {
    kFail,   // copy the chunks before `chunk_index` for real, then fail
    kStall,  // sleep `stall`, then copy for real
    kDie,    // end the process at once (_exit), as a crash mid-copy would
  };
  Action action = Action::kFail;
  std::optional<Direction> direction;  // unset: either
  // The rule fires on the n-th matching Copy call (1-based), counted from
  // when the rule was added; 0: on every matching call.
  uint64_t nth_copy = 0;
  // kFail: chunks [0, chunk_index) of the call are copied before the
  // failure, so a partial copy is what the service must clean up.
  uint32_t chunk_index = 0;
  std::chrono::milliseconds stall{0};
  Status error = Status::DeviceError("injected copy failure");
};

class FaultInjectionBackend : public Backend {
 public:
  explicit FaultInjectionBackend(std::unique_ptr<Backend> real) : real_(std::move(real)) {}

  void AddRule(FaultRule rule);
  void ClearRules();
  // Copy calls seen so far in each direction.
  uint64_t copies(Direction direction) const;

  const char* name() const override { return real_->name(); }
  int num_devices() const override { return real_->num_devices(); }
  Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec& spec) override {
    return real_->Open(spec);
  }
  SlabHooks slab_hooks() override { return real_->slab_hooks(); }
  Status CheckRegistration(int device, const std::vector<GroupAddresses>& groups,
                           uint64_t chunk_bytes) const override {
    return real_->CheckRegistration(device, groups, chunk_bytes);
  }
  Status Copy(Direction direction, int device, const CopyLayout& layout,
              const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint32_t>& slabs,
              CopyDeadlines& deadlines, const CopySignal* signal = nullptr) override;
  Result<BoardMapping> MapBoard(int device, uint8_t* base, uint64_t bytes) override {
    return real_->MapBoard(device, base, bytes);
  }
  void Describe(nlohmann::json& out) const override { real_->Describe(out); }
  LinkLoads* link_loads() override { return real_->link_loads(); }

 private:
  struct ActiveRule {
    FaultRule rule;
    uint64_t seen = 0;  // matching calls since the rule was added
  };
  // The rule that fires for this call, if any.
  std::optional<FaultRule> Match(Direction direction);

  std::unique_ptr<Backend> real_;
  mutable Mutex mutex_;
  std::vector<ActiveRule> rules_ KVSTASH_GUARDED_BY(mutex_);
  std::atomic<uint64_t> store_copies_{0};
  std::atomic<uint64_t> retrieve_copies_{0};
};

}  // namespace kvstash::backends
