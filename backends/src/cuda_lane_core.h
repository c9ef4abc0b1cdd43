// What one (GPU, direction) copy lane owns, and the primitives both of its
// copies (cuda_single_path_copy.h, cuda_multipath_copy.h) are made of: two
// streams (kernels, copy engine), the events that chain them, the plan
// arena, the layer addresses cached per registration and, in dma mode,
// this direction's half of the device's staging ring.
//
//   dma    store:    gather kernel -> staging -> cudaMemcpyAsync -> L1 slot
//          retrieve: L1 slot -> cudaMemcpyAsync -> staging -> scatter kernel
//          A batch runs in sub-batches (about 8 MiB, one chunk at least),
//          each in its own region of the ring, so kernels overlap copies
//          and a batch larger than the ring waits only for regions to free.
//   layer-wise retrieves (a board slot per layer range) copy and scatter
//          the ranges in steps of 1, 1, 2, 4, ... ranges, each step's slots
//          written after its scatter: the first layer is usable after its
//          own copy, and the many small copies of a 60- or 80-range request
//          do not each pay a copy's and a launch's fixed cost.
//   direct the kernels read and write the mapped pinned L1 slots themselves:
//          no GPU staging memory at all.
//
// Every group's layer addresses go to the GPU once per registration (cached
// by registration id); a request uploads only its chunk entries and block
// ids, one plan for all its layer ranges (a range is a slice of layers the
// kernel is told). A copy returns once every byte has arrived. Meanwhile the
// lane thread sleeps: `block` sleeps on a blocking-sync event until the
// driver wakes it; `poll` sleeps through the shortest time the copy can take
// (its bytes over the highest bandwidth this lane has measured) and then
// checks every few microseconds (with busy polling: checks on a core without
// sleeping), falling back to the blocking wait for a copy far slower than
// that.
//
// Owned by one lane and used by its thread only, so nothing here needs a
// lock (but plan_bytes, read by describe).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "cuda_copy_plan.h"
#include "cuda_lane_trace.h"
#include "kvstash/backends/backend.h"
#include "kvstash/config/server_config.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/streams.h"
#include "registration_cache.h"

namespace kvstash::backends {

using config::CompletionWait;  // parsed once, in the config
using config::TransferMode;

// expired(begin, end): whether a chunk of [begin, end) of a copy is past its
// deadline now; a copy then enqueues nothing from `begin` on.
using Expired = std::function<bool(size_t, size_t)>;

// Byte windows inside a flat chunk; empty: all of it.
using Windows = std::vector<std::pair<uint64_t, uint64_t>>;
// Per group: the (first, count) of its layers a kernel covers.
using LayerSlices = std::vector<std::pair<uint32_t, uint32_t>>;

class CudaLaneCore {
 public:
  struct Options {
    int device = 0;
    Direction direction = Direction::kStore;
    TransferMode mode = TransferMode::kDma;
    uint64_t staging_bytes = 0;  // dma mode
    CompletionWait wait = CompletionWait::kBlock;
    bool busy_poll = false;                // poll: check on a core, no sleeps
    bool trace = false;                    // time each sub-batch (debug logs)
    bool host_pointers_on_device = false;  // registered host memory has one address everywhere
  };
  static constexpr size_t kMaxRegions = 16;  // of the staging ring

  static Result<std::unique_ptr<CudaLaneCore>> Create(const Options& options);
  CudaLaneCore(const CudaLaneCore&) = delete;
  CudaLaneCore& operator=(const CudaLaneCore&) = delete;

  const Options& options() const { return options_; }
  bool store() const { return options_.direction == Direction::kStore; }
  cudaStream_t kernel_stream() const { return kernel_stream_.get(); }
  cudaStream_t copy_stream() const { return copy_stream_.get(); }
  // Region r of the staging ring holds its bytes (ready) / may be written
  // again (free). Spin events: only streams wait on them.
  cudaEvent_t region_ready(size_t r) const { return region_ready_[r].get(); }
  cudaEvent_t region_free(size_t r) const { return region_free_[r].get(); }
  uint64_t staging_bytes() const { return staging_.size(); }
  CopyPlan& plan() { return plan_; }
  // The plan arena and the cached layer addresses on the GPU (the arena
  // takes as much pinned host memory again).
  uint64_t plan_bytes() const { return plan_bytes_.load(std::memory_order_relaxed); }

  // Starts a copy of `layout` (its clock too): this lane's GPU current,
  // the registration's layer addresses on it (uploaded at first use), and
  // the start event that both streams' work of the copy follows.
  Result<const LayerAddresses*> Begin(const CopyLayout& layout);
  // Each chunk's L1 slot as this GPU's kernels address it (direct mode).
  Result<std::vector<uint8_t*>> DeviceFlats(const std::vector<kernels::ChunkCopy>& chunks) const;
  // Each of `chunks` chunks' slot in the staging ring, for the whole
  // request (one plan serves every step): chunk i in region
  // (i / per_region) % regions.
  std::vector<uint8_t*> StagingSlots(size_t chunks, size_t per_region, size_t regions,
                                     uint64_t chunk_bytes) const;
  // Enqueues the write of slot's value on the kernel stream.
  Status SignalSlot(const CopySignal& signal, uint32_t slot);
  // One kernel per group with layers in `slices` over chunks [begin, begin +
  // count) of the plan, on the kernel stream; `trace_step` names the
  // sub-batch for the trace.
  Status Launch(const LayerAddresses& addresses, const LayerSlices& slices, size_t begin,
                size_t count, size_t trace_step);
  // The kernels of Launch (a gather for a store, a scatter for a retrieve)
  // over `batch` on `stream`, whose GPU is current: a relay's too.
  Status LaunchGroups(const LayerAddresses& addresses, const LayerSlices& slices,
                      const kernels::DeviceChunkBatch& batch, cudaStream_t stream) const;
  // cudaMemcpyAsync between L1 slots and staging for chunks [begin, end) on
  // the copy stream: per window, one copy per run of slots adjacent in both
  // and in one slab (a 2D copy where the window is less than a chunk).
  Status CopySlots(const std::vector<kernels::ChunkCopy>& chunks,
                   const std::vector<uint32_t>& slabs, const std::vector<uint8_t*>& flats,
                   size_t begin, size_t end, uint64_t chunk_bytes, size_t trace_step,
                   const Windows& windows);

  // Once everything of the copy is enqueued: counts the GPU memory held
  // and, tracing, waits for the GPU to reach the start event.
  void Enqueued();
  // Waits, sleeping, for everything enqueued on both streams since Begin;
  // `bytes`: what the copy moves.
  Status Drain(uint64_t bytes);
  // After a copy of `chunks` chunks and `bytes` bytes that drained: learns
  // the lane's bandwidth from it and logs where its time went (debug).
  Status Finished(size_t chunks, uint64_t bytes);

 private:
  explicit CudaLaneCore(const Options& options) : options_(options) {}
  Status CreateEvents();
  // Sleeps through the shortest time the copy can take, then polls done_.
  Status Poll(uint64_t bytes);

  const Options options_;
  cuda::Stream kernel_stream_;
  cuda::Stream copy_stream_;
  cuda::Event region_ready_[kMaxRegions];
  cuda::Event region_free_[kMaxRegions];
  cuda::Event kernels_done_;
  cuda::Event started_;  // timing: where a copy's GPU work begins
  cuda::Event done_;     // blocking, timing: the lane thread sleeps on it
  // The highest copy bandwidth measured so far (poll): never overestimating
  // a copy's time, the lane never sleeps past its end. 40 GB/s at first.
  double bytes_per_ns_ = 40;
  cuda::DeviceBuffer staging_;  // dma mode only
  CopyPlan plan_;               // one per request, all its steps
  RegistrationCache<LayerAddresses> addresses_{64};
  LaneTrace trace_;
  size_t traced_steps_ = 0;
  // The copy under way: when it began, when it was all enqueued, when its
  // GPU work began (tracing; else when it was enqueued).
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point enqueued_;
  std::chrono::steady_clock::time_point gpu_began_;
  std::atomic<uint64_t> plan_bytes_{0};
  uint32_t max_ctas_ = 0;  // grid cap of the kernels (direct mode); 0: none
};

}  // namespace kvstash::backends
