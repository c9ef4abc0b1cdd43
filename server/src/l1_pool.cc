// Slab and slot bookkeeping for the L1 pool.
#include "l1_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace kvstash::server {

Result<std::unique_ptr<L1Pool>> L1Pool::Create(uint64_t capacity_bytes, uint64_t slab_bytes,
                                               uint32_t prepare_threads, SlabHooks hooks) {
  if (capacity_bytes == 0 || slab_bytes == 0) {
    return Status::InvalidArgument("L1 capacity and slab size must be positive");
  }
  void* base = mmap(nullptr, capacity_bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of a " + std::to_string(capacity_bytes) +
                             "-byte L1 pool failed: " + std::strerror(errno));
  }
  std::unique_ptr<L1Pool> pool(
      new L1Pool(static_cast<uint8_t*>(base), capacity_bytes, slab_bytes, std::move(hooks)));
  const uint32_t threads =
      std::max<uint32_t>(1, std::min<uint32_t>(prepare_threads, pool->num_slabs()));
  for (uint32_t t = 0; t < threads; ++t) {
    pool->preparers_.emplace_back([p = pool.get(), t, threads] { p->PrepareSlabs(t, threads); });
  }
  return pool;
}

L1Pool::L1Pool(uint8_t* base, uint64_t capacity_bytes, uint64_t slab_bytes, SlabHooks hooks)
    : base_(base),
      capacity_bytes_(capacity_bytes),
      slab_bytes_(std::min(slab_bytes, capacity_bytes)),
      hooks_(std::move(hooks)) {
  for (uint64_t offset = 0; offset < capacity_bytes_; offset += slab_bytes_) {
    auto slab = std::make_unique<Slab>();
    slab->data = base_ + offset;
    slab->bytes = std::min(slab_bytes_, capacity_bytes_ - offset);
    slabs_.push_back(std::move(slab));
  }
}

L1Pool::~L1Pool() {
  stopping_.store(true);
  for (std::thread& t : preparers_) t.join();
  for (auto& slab : slabs_) {
    if (slab->ready.load() && hooks_.release) hooks_.release(slab->data, slab->bytes);
  }
  munmap(base_, capacity_bytes_);
}

void L1Pool::PrepareSlabs(uint32_t first, uint32_t stride) {
  for (uint32_t i = first; i < slabs_.size() && !stopping_.load(); i += stride) {
    Slab& slab = *slabs_[i];
    Status status = hooks_.prepare ? hooks_.prepare(slab.data, slab.bytes) : Status::Ok();
    if (status.ok()) {
      slab.ready.store(true, std::memory_order_release);
      ready_slabs_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      failed_slabs_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

void L1Pool::WaitUntilPrepared() const {
  while (ready_slabs() + failed_slabs() < num_slabs()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

uint64_t L1Pool::ready_bytes() const {
  uint64_t bytes = 0;
  for (const auto& slab : slabs_) {
    if (slab->ready.load(std::memory_order_acquire)) bytes += slab->bytes;
  }
  return bytes;
}

std::optional<L1Pool::Slot> L1Pool::Allocate(uint64_t slot_bytes) {
  if (slot_bytes == 0) return std::nullopt;
  std::vector<uint32_t>& with_room = slabs_with_room_[slot_bytes];
  if (with_room.empty()) {
    // Give this size a free ready slab.
    for (uint32_t i = 0; i < slabs_.size(); ++i) {
      Slab& slab = *slabs_[i];
      if (slab.slot_bytes != 0 || !slab.ready.load(std::memory_order_acquire) ||
          slab.bytes < slot_bytes) {
        continue;
      }
      slab.slot_bytes = slot_bytes;
      const uint32_t count = uint32_t(slab.bytes / slot_bytes);
      slab.free_slots.resize(count);
      // Pop from the back: hand out low addresses first.
      for (uint32_t s = 0; s < count; ++s) slab.free_slots[s] = count - 1 - s;
      with_room.push_back(i);
      break;
    }
    if (with_room.empty()) return std::nullopt;
  }
  const uint32_t slab_index = with_room.back();
  Slab& slab = *slabs_[slab_index];
  const uint32_t index = slab.free_slots.back();
  slab.free_slots.pop_back();
  if (slab.free_slots.empty()) with_room.pop_back();
  ++slab.used;
  used_bytes_ += slot_bytes;
  return Slot{slab_index, index, slab.data + uint64_t(index) * slot_bytes};
}

void L1Pool::Free(const Slot& slot) {
  Slab& slab = *slabs_[slot.slab];
  std::vector<uint32_t>& with_room = slabs_with_room_[slab.slot_bytes];
  if (slab.free_slots.empty()) with_room.push_back(slot.slab);
  slab.free_slots.push_back(slot.index);
  --slab.used;
  used_bytes_ -= slab.slot_bytes;
  if (slab.used == 0) {
    // An empty slab goes back to the free set, for any slot size.
    with_room.erase(std::find(with_room.begin(), with_room.end(), slot.slab));
    slab.slot_bytes = 0;
    slab.free_slots.clear();
  }
}

}  // namespace kvstash::server
