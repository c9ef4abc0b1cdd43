// dma and direct copies of one lane.
#include "cuda_copy_lane.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "backends_logger.h"
#include "cuda_relay_path.h"
#include "kvstash/cuda/board_device.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

// Bytes of one sub-batch of a staged copy (one chunk at least).
constexpr uint64_t kSubBatchBytes = 8 << 20;
// Direct mode: CTAs of 256 threads per SM one lane's kernels take (an SM
// holds 8): half the GPU per direction.
constexpr uint32_t kDirectCtasPerSm = 4;

}  // namespace

Result<std::unique_ptr<CudaCopyLane>> CudaCopyLane::Create(const Options& options) {
  std::unique_ptr<CudaCopyLane> lane(new CudaCopyLane(options));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  for (cuda::Stream* stream : {&lane->kernel_stream_, &lane->copy_stream_}) {
    Result<cuda::Stream> created = cuda::Stream::Create();
    if (!created.ok()) return created.status();
    *stream = std::move(*created);
  }
  std::vector<cuda::Event*> events = {&lane->kernels_done_};
  for (size_t r = 0; r < kMaxRegions; ++r) {
    events.push_back(&lane->region_ready_[r]);
    events.push_back(&lane->region_free_[r]);
  }
  for (cuda::Event* event : events) {
    Result<cuda::Event> created = cuda::Event::Create(cuda::Event::Wait::kSpin);
    if (!created.ok()) return created.status();
    *event = std::move(*created);
  }
  Result<cuda::Event> started =
      cuda::Event::Create(cuda::Event::Wait::kSpin, cuda::Event::Timing::kOn);
  if (!started.ok()) return started.status();
  lane->started_ = std::move(*started);
  Result<cuda::Event> done =
      cuda::Event::Create(cuda::Event::Wait::kBlock, cuda::Event::Timing::kOn);
  if (!done.ok()) return done.status();
  lane->done_ = std::move(*done);
  if (options.trace) KVSTASH_RETURN_IF_ERROR(lane->trace_.Enable());
  if (options.mode == TransferMode::kDirect) {
    // Kernels over mapped host memory are bound by PCIe, not SMs: each lane
    // takes at most half of the GPU's resident CTAs, so that a store and a
    // retrieve run side by side instead of one waiting for the other's grid.
    int sms = 0;
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options.device));
    lane->max_ctas_ = uint32_t(std::max(1, sms)) * kDirectCtasPerSm;
  }
  if (options.mode == TransferMode::kDma) {
    Result<cuda::DeviceBuffer> staging = cuda::DeviceBuffer::Allocate(options.staging_bytes);
    if (!staging.ok()) {
      return Status::Exhausted("cannot allocate a " + std::to_string(options.staging_bytes >> 20) +
                               " MiB staging ring on GPU " + std::to_string(options.device) + ": " +
                               staging.status().message() +
                               "; lower --staging-mb or use --transfer-mode direct");
    }
    lane->staging_ = std::move(*staging);
  }
  return lane;
}

Status CudaCopyLane::Copy(const CopyLayout& layout,
                          const std::vector<kernels::ChunkCopy>& all_chunks,
                          const std::vector<uint32_t>& all_slabs, CopyDeadlines& deadlines,
                          const CopySignal* signal) {
  deadlines.missed.assign(all_chunks.size(), 0);
  // Chunks past their deadline now are not copied at all.
  std::vector<kernels::ChunkCopy> live;
  std::vector<uint32_t> live_slabs;
  std::vector<size_t> index;  // live chunk -> its place in all_chunks
  if (deadlines.any()) {
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < all_chunks.size(); ++i) {
      if (deadlines.Passed(i, now)) {
        deadlines.missed[i] = 1;
      } else {
        live.push_back(all_chunks[i]);
        live_slabs.push_back(all_slabs[i]);
        index.push_back(i);
      }
    }
  }
  const std::vector<kernels::ChunkCopy>& chunks = deadlines.any() ? live : all_chunks;
  const std::vector<uint32_t>& slabs = deadlines.any() ? live_slabs : all_slabs;
  if (chunks.empty()) return Status::Ok();
  const auto expired = [&](size_t begin, size_t end) {
    if (!deadlines.any()) return false;
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = begin; i < end; ++i) {
      if (deadlines.Passed(index[i], now)) return true;
    }
    return false;
  };
  size_t stopped_at = chunks.size();
  const auto start = std::chrono::steady_clock::now();
  traced_steps_ = 0;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  // Between two Copy calls nothing is in flight: an entry the cache drops
  // here is read by no copy.
  Result<const LayerAddresses*> addresses = AddressesOf(layout);
  if (!addresses.ok()) return addresses.status();
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(started_.get(), kernel_stream_.get()));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), started_.get(), 0));
  Status copied = Status::Ok();
  // A gated store reaches the lane only once its gate is open (the transfer
  // worker checks it from the CPU): no stream here waits on an engine.
  if (options_.mode == TransferMode::kDirect) {
    copied = CopyDirect(layout, **addresses, CopySteps(layout.groups, signal), chunks, signal);
  } else if (AcquireRelays(layout, chunks.size()) > 0) {
    copied = CopyThroughStagingMultipath(layout, **addresses, chunks, slabs, signal, expired,
                                         &stopped_at);
  } else {
    copied = CopyThroughStaging(layout, **addresses, chunks, slabs, signal, expired, &stopped_at);
  }
  if (copied.ok() && signal != nullptr && signal->done_slot) {
    // After the last gather: the engine's blocks may be reused.
    copied = SignalSlot(*signal, *signal->done_slot);
  }
  for (size_t i = stopped_at; i < chunks.size(); ++i)
    deadlines.missed[index.empty() ? i : index[i]] = 1;
  uint64_t plan_bytes = plan_.device_bytes();
  addresses_.ForEach([&](const LayerAddresses& a) { plan_bytes += a.device_bytes(); });
  plan_bytes_.store(plan_bytes, std::memory_order_relaxed);
  const auto enqueued = std::chrono::steady_clock::now();
  // Tracing: when the GPU reached the start event, on the host clock (no
  // earlier than `enqueued`): how long the GPU took to start this copy.
  auto gpu_began = enqueued;
  if (trace_.enabled()) {
    while (cudaEventQuery(started_.get()) == cudaErrorNotReady) {
    }
    (void)cudaGetLastError();
    gpu_began = std::chrono::steady_clock::now();
  }
  // Whatever was enqueued finishes before the plan, the ring or a slot is
  // touched again, also after a failed launch.
  const uint64_t bytes = chunks.size() * layout.chunk_bytes;
  JoinRelays();
  const Status drained = Drain(bytes, start);
  ReleaseRelays(drained.ok());
  if (!copied.ok() || !drained.ok()) return copied.ok() ? drained : copied;
  const auto woke = std::chrono::steady_clock::now();
  float gpu_ms = 0;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&gpu_ms, started_.get(), done_.get()));
  // Large copies teach the lane its bandwidth; small ones are all overhead.
  // The maximum, not an average: a copy slowed by contention must not make
  // the next one oversleep (an average did, by 10% on a 2 GiB retrieve).
  if (bytes >= (1u << 20) && gpu_ms > 0) {
    const double measured = double(bytes) / (double(gpu_ms) * 1e6);
    bytes_per_ns_ = std::min(std::max(bytes_per_ns_, measured), 1000.0);
  }
  auto logger = Logger();
  if (logger->should_log(spdlog::level::debug)) {
    const auto us = [&](auto t) {
      return std::chrono::duration_cast<std::chrono::microseconds>(t - start).count();
    };
    logger->debug(
        "{} of {} chunks, {} bytes: enqueued after {} us, GPU began by {} us, {:.0f} us on "
        "the GPU, lane awake after {} us; GPU steps (us): {}; began at {} ns",
        options_.direction == Direction::kStore ? "store" : "retrieve", chunks.size(), bytes,
        us(enqueued), us(gpu_began), double(gpu_ms) * 1000, us(woke),
        trace_.Report(started_.get(), traced_steps_),
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
  }
  return Status::Ok();
}

Result<const LayerAddresses*> CudaCopyLane::AddressesOf(const CopyLayout& layout) {
  if (const LayerAddresses* found = addresses_.Find(layout.registration_id)) return found;
  Result<LayerAddresses> uploaded = LayerAddresses::Upload(layout.groups, kernel_stream_.get());
  if (!uploaded.ok()) return uploaded.status();
  return &addresses_.Insert(layout.registration_id, std::move(*uploaded));
}

Status CudaCopyLane::SignalSlot(const CopySignal& signal, uint32_t slot) {
  // After every earlier write of the stream (the scatter's): whoever sees
  // the value sees the data.
  return cuda::StreamWriteBoardWord(kernel_stream_.get(), signal.board->device_value(slot),
                                    signal.sequence);
}

Status CudaCopyLane::CopyDirect(const CopyLayout& layout, const LayerAddresses& addresses,
                                const std::vector<CopyStep>& steps,
                                const std::vector<kernels::ChunkCopy>& chunks,
                                const CopySignal* signal) {
  std::vector<uint8_t*> flats(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (options_.host_pointers_on_device) {
      flats[i] = chunks[i].flat;
      continue;
    }
    void* mapped = nullptr;
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&mapped, chunks[i].flat, 0));
    flats[i] = static_cast<uint8_t*>(mapped);
  }
  if (AcquireRelays(layout, chunks.size()) > 0) {
    // Relays on which the engine's memory is not open stay out.
    for (size_t h = 0; h < held_.size();) {
      Result<const LayerAddresses*> there = RelayAddressesOf(*held_[h].path, layout);
      if (there.ok()) {
        held_[h++].addresses = *there;
        continue;
      }
      Logger()->debug("GPU {} cannot help GPU {} with registration {:x}: {}",
                      held_[h].path->device(), options_.device, layout.registration_id,
                      there.status().ToString());
      held_[h].path->Release();
      held_.erase(held_.begin() + long(h));
    }
    if (!held_.empty()) return CopyDirectMultipath(layout, addresses, steps, chunks, flats, signal);
  }
  KVSTASH_RETURN_IF_ERROR(plan_.Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(plan_.Upload(kernel_stream_.get()));
  for (size_t s = 0; s < steps.size(); ++s) {
    KVSTASH_RETURN_IF_ERROR(Launch(addresses, steps[s].slices, 0, chunks.size(), s));
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaCopyLane::CopyThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                                        const std::vector<kernels::ChunkCopy>& chunks,
                                        const std::vector<uint32_t>& slabs,
                                        const CopySignal* signal,
                                        const std::function<bool(size_t, size_t)>& expired,
                                        size_t* stopped_at) {
  const uint64_t chunk_bytes = layout.chunk_bytes;
  const uint64_t slots = chunk_bytes == 0 ? 0 : staging_.size() / chunk_bytes;
  if (slots == 0) {  // CheckRegistration refuses such layouts; kept as a guard
    return Status::TooLarge("a chunk of " + std::to_string(chunk_bytes) +
                            " bytes does not fit the staging ring of " +
                            std::to_string(staging_.size()) + " bytes");
  }
  // The ring is cut into regions of one sub-batch each, so that the kernel
  // of one sub-batch runs while the copies of others are under way. A
  // sub-batch is as small as keeps per-copy overheads negligible: the
  // kernel time nothing overlaps (that of the first or last sub-batch)
  // shrinks with it. Each chunk keeps one staging slot for the whole
  // request (one plan serves every step): chunk i sits in region
  // (i / per_region) % regions.
  const size_t per_region = size_t(std::clamp<uint64_t>(
      (kSubBatchBytes + chunk_bytes - 1) / chunk_bytes, 1, std::max<uint64_t>(1, slots / 2)));
  const bool store = options_.direction == Direction::kStore;
  const size_t regions = std::min<size_t>(kMaxRegions, size_t(slots) / per_region);
  const size_t batches = (chunks.size() + per_region - 1) / per_region;
  const std::vector<CopyStep> steps = CopySteps(layout.groups, signal);
  // Where every chunk has a slot of its own, steps never wait for a region
  // to free: they touch different bytes of it. Otherwise a sub-batch waits
  // for the kernel or copy of the one before it in its region.
  const bool reuse = batches > regions;
  cudaStream_t kernels = kernel_stream_.get();
  cudaStream_t copies = copy_stream_.get();
  const std::vector<uint8_t*> flats = StagingSlots(chunks.size(), per_region, regions, chunk_bytes);
  KVSTASH_RETURN_IF_ERROR(plan_.Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(plan_.Upload(kernels));
  for (size_t s = 0; s < steps.size(); ++s) {
    const CopyStep& step = steps[s];
    bool any_layer = false;
    for (const auto& slice : step.slices) any_layer |= slice.second > 0;
    for (size_t b = 0, begin = 0; any_layer && begin < chunks.size(); ++b, begin += per_region) {
      const size_t k = s * batches + b;  // the sub-batch, across steps
      const size_t end = std::min(chunks.size(), begin + per_region);
      if (expired(begin, end)) {  // enqueue no sub-batch past a deadline
        // Chunks [begin, end) and later miss this step: they are missed.
        // Earlier chunks missing a later step are missed too.
        *stopped_at = s == 0 ? begin : 0;
        return Status::Ok();
      }
      const size_t reg = b % regions;
      const bool wait_free = reuse && k >= regions;
      cudaEvent_t ready = region_ready_[reg].get();
      cudaEvent_t free = region_free_[reg].get();
      if (store) {
        // gather -> ready -> D2H copy -> free (the gather of b + regions waits for it)
        if (wait_free) KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, free, 0));
        KVSTASH_RETURN_IF_ERROR(Launch(addresses, step.slices, begin, end - begin, k));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, kernels));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, ready, 0));
        KVSTASH_RETURN_IF_ERROR(
            CopySlots(chunks, slabs, flats, begin, end, chunk_bytes, k, step.windows));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(free, copies));
      } else {
        // H2D copy -> ready -> scatter -> free (the copy of b + regions waits for it)
        if (wait_free) KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, free, 0));
        KVSTASH_RETURN_IF_ERROR(
            CopySlots(chunks, slabs, flats, begin, end, chunk_bytes, k, step.windows));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, copies));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, ready, 0));
        KVSTASH_RETURN_IF_ERROR(Launch(addresses, step.slices, begin, end - begin, k));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(free, kernels));
      }
    }
    for (uint32_t slot : step.slots) KVSTASH_RETURN_IF_ERROR(SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

std::vector<uint8_t*> CudaCopyLane::StagingSlots(size_t chunks, size_t per_region, size_t regions,
                                                 uint64_t chunk_bytes) const {
  std::vector<uint8_t*> flats(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    const size_t region = (i / per_region) % regions;
    flats[i] = staging_.data() + (region * per_region + i % per_region) * chunk_bytes;
  }
  return flats;
}

Status CudaCopyLane::Launch(const LayerAddresses& addresses,
                            const std::vector<std::pair<uint32_t, uint32_t>>& slices, size_t begin,
                            size_t count, size_t trace_step) {
  const kernels::DeviceChunkBatch batch = plan_.Slice(begin, count);
  cudaStream_t stream = kernel_stream_.get();
  KVSTASH_RETURN_IF_ERROR(trace_.Mark(stream, trace_step, LaneTrace::Stage::kKernel, true));
  KVSTASH_RETURN_IF_ERROR(LaunchGroups(addresses, slices, batch, stream));
  traced_steps_ = std::max(traced_steps_, trace_step + 1);
  return trace_.Mark(stream, trace_step, LaneTrace::Stage::kKernel, false);
}

Status CudaCopyLane::LaunchGroups(const LayerAddresses& addresses,
                                  const std::vector<std::pair<uint32_t, uint32_t>>& slices,
                                  const kernels::DeviceChunkBatch& batch,
                                  cudaStream_t stream) const {
  for (size_t g = 0; g < slices.size(); ++g) {
    const auto [first, layers] = slices[g];
    if (layers == 0) continue;
    const kernels::PreparedGroup group = addresses.Slice(g, first, layers);
    KVSTASH_RETURN_IF_ERROR(options_.direction == Direction::kStore
                                ? kernels::GatherChunks(group, batch, stream, max_ctas_)
                                : kernels::ScatterChunks(group, batch, stream, max_ctas_));
  }
  return Status::Ok();
}

Status CudaCopyLane::CopySlots(const std::vector<kernels::ChunkCopy>& chunks,
                               const std::vector<uint32_t>& slabs,
                               const std::vector<uint8_t*>& flats, size_t begin, size_t end,
                               uint64_t chunk_bytes, size_t trace_step,
                               const std::vector<std::pair<uint64_t, uint64_t>>& windows,
                               cudaStream_t stream) {
  const bool store = options_.direction == Direction::kStore;
  const bool traced = stream == nullptr;
  if (traced) stream = copy_stream_.get();
  if (traced)
    KVSTASH_RETURN_IF_ERROR(trace_.Mark(stream, trace_step, LaneTrace::Stage::kCopy, true));
  const std::vector<std::pair<uint64_t, uint64_t>> whole = {{0, chunk_bytes}};
  const auto& spans = windows.empty() ? whole : windows;
  size_t first = begin;
  while (first < end) {
    size_t last = first + 1;  // the run is [first, last)
    while (last < end && chunks[last].flat == chunks[last - 1].flat + chunk_bytes &&
           flats[last] == flats[last - 1] + chunk_bytes && slabs[last] == slabs[first]) {
      ++last;
    }
    const size_t rows = last - first;
    for (const auto& [lo, hi] : spans) {
      uint8_t* slot = chunks[first].flat + lo;
      uint8_t* staging = flats[first] + lo;
      const uint64_t width = hi - lo;
      if (rows == 1 || width == chunk_bytes) {
        const uint64_t bytes = width == chunk_bytes ? rows * chunk_bytes : width;
        KVSTASH_CUDA_RETURN_IF_ERROR(
            store ? cudaMemcpyAsync(slot, staging, bytes, cudaMemcpyDeviceToHost, stream)
                  : cudaMemcpyAsync(staging, slot, bytes, cudaMemcpyHostToDevice, stream));
      } else {  // the same window of each chunk of the run: one 2D copy
        KVSTASH_CUDA_RETURN_IF_ERROR(
            store ? cudaMemcpy2DAsync(slot, chunk_bytes, staging, chunk_bytes, width, rows,
                                      cudaMemcpyDeviceToHost, stream)
                  : cudaMemcpy2DAsync(staging, chunk_bytes, slot, chunk_bytes, width, rows,
                                      cudaMemcpyHostToDevice, stream));
      }
    }
    first = last;
  }
  if (!traced) return Status::Ok();
  return trace_.Mark(stream, trace_step, LaneTrace::Stage::kCopy, false);
}

Status CudaCopyLane::Drain(uint64_t bytes, std::chrono::steady_clock::time_point start) {
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernels_done_.get(), kernel_stream_.get()));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), kernels_done_.get(), 0));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_.get(), copy_stream_.get()));
  if (options_.wait == CompletionWait::kPoll) return Poll(bytes, start);
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_.get()));
  return Status::Ok();
}

Status CudaCopyLane::Poll(uint64_t bytes, std::chrono::steady_clock::time_point start) {
  using std::chrono::microseconds;
  // Short sleeps on this thread end when asked, not up to 50 us later.
  thread_local const bool fine_timer_slack = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
  (void)fine_timer_slack;
  const auto shortest = std::chrono::nanoseconds(uint64_t(double(bytes) / bytes_per_ns_));
  std::this_thread::sleep_until(start + shortest * 19 / 20);
  // Checks for a while past that; a copy far slower (a contended link) ends
  // on the blocking wait instead.
  const auto give_up = std::chrono::steady_clock::now() + microseconds(2000) + shortest / 2;
  while (std::chrono::steady_clock::now() < give_up) {
    const cudaError_t state = cudaEventQuery(done_.get());
    if (state != cudaErrorNotReady) return cuda::CudaStatus(state, "cudaEventQuery");
    if (!options_.busy_poll) std::this_thread::sleep_for(microseconds(5));
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_.get()));
  return Status::Ok();
}

}  // namespace kvstash::backends
