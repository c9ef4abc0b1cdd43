// The L1 pool: one anonymous mapping cut into slabs (the pinning unit, so no
// slot ever straddles two separately registered slices). A slab serves one
// slot size at a time and returns to the free set when its last slot is
// freed, so registrations of different chunk sizes share the capacity.
//
// Slabs are prepared (pages touched, and pinned by the CUDA backend) by
// background threads in parallel, so the daemon answers at once; a slab is
// used only once it is ready.
//
// Allocate/Free are not thread-safe: ChunkStore's mutex guards them. The
// preparation threads touch only slab readiness (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "kvstash/backends/slab_hooks.h"
#include "kvstash/status.h"

namespace kvstash::server {

using backends::SlabHooks;  // the backend says how a slab is touched and pinned

class L1Pool {
 public:
  struct Slot {
    uint32_t slab = 0;
    uint32_t index = 0;
    uint8_t* data = nullptr;
  };

  static Result<std::unique_ptr<L1Pool>> Create(uint64_t capacity_bytes, uint64_t slab_bytes,
                                                uint32_t prepare_threads, SlabHooks hooks);
  ~L1Pool();
  L1Pool(const L1Pool&) = delete;
  L1Pool& operator=(const L1Pool&) = delete;

  // A free slot of exactly `slot_bytes`, or nullopt when every ready slab is
  // full or serves another size.
  std::optional<Slot> Allocate(uint64_t slot_bytes);
  void Free(const Slot& slot);

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t slab_bytes() const { return slab_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  uint32_t num_slabs() const { return uint32_t(slabs_.size()); }
  uint32_t ready_slabs() const { return ready_slabs_.load(std::memory_order_acquire); }
  uint32_t failed_slabs() const { return failed_slabs_.load(std::memory_order_acquire); }
  uint64_t ready_bytes() const;
  // Blocks until every slab was prepared (or failed); for tests and benches.
  void WaitUntilPrepared() const;

 private:
  struct Slab {
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
    uint64_t slot_bytes = 0;  // 0: not serving any size
    uint32_t used = 0;
    std::vector<uint32_t> free_slots;
    std::atomic<bool> ready{false};
  };
  L1Pool(uint8_t* base, uint64_t capacity_bytes, uint64_t slab_bytes, SlabHooks hooks);
  void PrepareSlabs(uint32_t first, uint32_t stride);

  uint8_t* base_;
  uint64_t capacity_bytes_;
  uint64_t slab_bytes_;
  SlabHooks hooks_;
  std::vector<std::unique_ptr<Slab>> slabs_;
  std::map<uint64_t, std::vector<uint32_t>> slabs_with_room_;  // slot size -> slabs
  uint64_t used_bytes_ = 0;
  std::atomic<uint32_t> ready_slabs_{0};
  std::atomic<uint32_t> failed_slabs_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> preparers_;
};

}  // namespace kvstash::server
