// L1 pool: slabs, slot sizes, capacity and background preparation.
#include "l1_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

namespace kvstash::server {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<L1Pool> MakePool(uint64_t capacity, uint64_t slab, SlabHooks hooks = {}) {
  auto pool = L1Pool::Create(capacity, slab, 2, std::move(hooks));
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  (*pool)->WaitUntilPrepared();
  return std::move(*pool);
}

TEST(L1Pool, NeverHandsOutMoreThanCapacity) {
  auto pool = MakePool(8 * kMiB, 2 * kMiB);
  std::set<uint8_t*> seen;
  int slots = 0;
  while (auto slot = pool->Allocate(kMiB)) {
    EXPECT_TRUE(seen.insert(slot->data).second) << "slot handed out twice";
    ++slots;
  }
  EXPECT_EQ(slots, 8);
  EXPECT_EQ(pool->used_bytes(), 8 * kMiB);
}

TEST(L1Pool, SlotsNeverStraddleSlabs) {
  // 3 MiB slots in 4 MiB slabs: one slot per slab, 1 MiB of each slab unused.
  auto pool = MakePool(16 * kMiB, 4 * kMiB);
  std::vector<L1Pool::Slot> slots;
  while (auto slot = pool->Allocate(3 * kMiB)) slots.push_back(*slot);
  ASSERT_EQ(slots.size(), 4u);
  for (const auto& s : slots) {
    EXPECT_EQ(s.index, 0u);
  }
}

TEST(L1Pool, EmptySlabServesAnotherSlotSize) {
  auto pool = MakePool(4 * kMiB, 2 * kMiB);
  auto a = pool->Allocate(kMiB);
  auto b = pool->Allocate(kMiB);
  auto c = pool->Allocate(kMiB);  // second slab now serves 1 MiB slots too
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(pool->Allocate(2 * kMiB)) << "both slabs serve 1 MiB slots";
  pool->Free(*c);  // second slab empties and returns to the free set
  EXPECT_TRUE(pool->Allocate(2 * kMiB));
}

TEST(L1Pool, UsesOnlyPreparedSlabs) {
  std::atomic<bool> release{false};
  SlabHooks hooks;
  hooks.prepare = [&](uint8_t*, uint64_t) {
    while (!release.load()) std::this_thread::yield();
    return Status::Ok();
  };
  auto pool = L1Pool::Create(4 * kMiB, 2 * kMiB, 1, hooks);
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE((*pool)->Allocate(kMiB)) << "a slab was used before it was prepared";
  release = true;
  (*pool)->WaitUntilPrepared();
  EXPECT_EQ((*pool)->ready_slabs(), 2u);
  EXPECT_TRUE((*pool)->Allocate(kMiB));
}

TEST(L1Pool, FailedSlabsAreNeverUsed) {
  SlabHooks hooks;
  hooks.prepare = [](uint8_t*, uint64_t) { return Status::DeviceError("pinning failed"); };
  auto pool = MakePool(4 * kMiB, 2 * kMiB, hooks);
  EXPECT_EQ(pool->failed_slabs(), 2u);
  EXPECT_FALSE(pool->Allocate(kMiB));
}

}  // namespace
}  // namespace kvstash::server
