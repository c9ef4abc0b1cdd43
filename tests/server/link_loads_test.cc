// The per-link queues the transfer workers keep for multi-path copies: a
// job's bytes count on its device and direction from the moment it is
// queued until it has completed, and not at all where the backend decides
// nothing from them.
#include <gtest/gtest.h>
#include <atomic>

#include <condition_variable>
#include <future>
#include <mutex>

#include "kvstash/backends/link_loads.h"
#include "transfer_worker.h"

namespace kvstash::server {
namespace {

// Copies nothing; each Copy waits until the test opens the gate.
class GatedBackend : public Backend {
 public:
  explicit GatedBackend(bool with_loads) : with_loads_(with_loads) {}
  const char* name() const override { return "gated"; }
  int num_devices() const override { return 2; }
  Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec&) override {
    return Status::Unavailable("no memory here");
  }
  SlabHooks slab_hooks() override { return {}; }
  Status Copy(Direction, int, const CopyLayout&, const std::vector<kernels::ChunkCopy>&,
              const std::vector<uint32_t>&, CopyDeadlines&, const CopySignal*) override {
    std::unique_lock<std::mutex> lock(mutex_);
    entered_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    return Status::Ok();
  }
  LinkLoads* link_loads() override { return with_loads_ ? &loads_ : nullptr; }

  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return entered_; });
  }
  void OpenGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  LinkLoads loads_{2};

 private:
  const bool with_loads_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false;
  bool open_ = false;
};

std::shared_ptr<Registration> SmallRegistration() {
  LayerGeometry g;
  g.num_blocks = 16;
  g.kv_count = 2;
  g.block_tokens = 16;
  g.num_heads = 1;
  g.head_bytes = 64;
  g.head_stride = 64;
  g.token_stride = 64;
  g.kv_stride = 16 * 64;
  g.block_stride = 2 * 16 * 64;
  auto registration = std::make_shared<Registration>();
  Result<ChunkLayout> layout = ChunkLayout::Build({g, g}, 64);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  if (layout.ok()) registration->layout = *layout;
  return registration;
}

TEST(LinkLoads, AJobCountsOnItsLinkFromQueuedUntilCompleted) {
  GatedBackend backend(true);
  const std::atomic<bool> stopping{false};
  TransferWorker worker(backend, 1, std::chrono::microseconds(0), stopping);
  std::shared_ptr<Registration> registration = SmallRegistration();
  const uint64_t chunk_bytes = registration->layout.chunk_bytes();
  ASSERT_GT(chunk_bytes, 0u);
  std::promise<void> completed;
  TransferJob job;
  job.registration = registration;
  const std::vector<uint32_t> ids = {0, 1, 2, 3};
  for (int c = 0; c < 3; ++c) job.Add(kernels::ChunkCopy{}, 0, ids.data(), ids.size());
  job.Seal();
  job.complete = [&](const Status&, const std::vector<uint8_t>&, const Status&) {
    completed.set_value();
  };
  worker.Submit(Direction::kRetrieve, std::move(job));
  // Queued or in flight, either way on device 1's retrieve link.
  EXPECT_EQ(backend.loads_.Bytes(1, Direction::kRetrieve), 3 * chunk_bytes);
  backend.WaitEntered();
  EXPECT_EQ(backend.loads_.Bytes(1, Direction::kRetrieve), 3 * chunk_bytes);
  EXPECT_EQ(backend.loads_.Bytes(1, Direction::kStore), 0u);
  EXPECT_EQ(backend.loads_.Bytes(0, Direction::kRetrieve), 0u);
  backend.OpenGate();
  completed.get_future().wait();
  EXPECT_EQ(backend.loads_.Bytes(1, Direction::kRetrieve), 0u);
}

TEST(LinkLoads, NothingIsCountedWhereTheBackendKeepsNoLoads) {
  GatedBackend backend(false);
  const std::atomic<bool> stopping{false};
  TransferWorker worker(backend, 0, std::chrono::microseconds(0), stopping);
  std::promise<void> completed;
  TransferJob job;
  job.registration = SmallRegistration();
  const uint32_t ids[] = {0, 1, 2, 3};
  job.Add(kernels::ChunkCopy{}, 0, ids, 4);
  job.Seal();
  job.complete = [&](const Status&, const std::vector<uint8_t>&, const Status&) {
    completed.set_value();
  };
  worker.Submit(Direction::kRetrieve, std::move(job));
  backend.WaitEntered();
  EXPECT_EQ(backend.loads_.Bytes(0, Direction::kRetrieve), 0u);
  backend.OpenGate();
  completed.get_future().wait();
}

}  // namespace
}  // namespace kvstash::server
