// A copy lane's streams, events, staging ring and plan, and the primitives
// its copies are made of.
#include "cuda_lane_core.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <algorithm>
#include <string>
#include <thread>

#include "backends_logger.h"
#include "kvstash/cuda/board_device.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

// Direct mode: CTAs of 256 threads per SM one lane's kernels take (an SM
// holds 8): half the GPU per direction.
constexpr uint32_t kDirectCtasPerSm = 4;

}  // namespace

Result<std::unique_ptr<CudaLaneCore>> CudaLaneCore::Create(const Options& options) {
  std::unique_ptr<CudaLaneCore> lane(new CudaLaneCore(options));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  KVSTASH_RETURN_IF_ERROR(lane->CreateEvents());
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

Status CudaLaneCore::CreateEvents() {
  for (cuda::Stream* stream : {&kernel_stream_, &copy_stream_}) {
    Result<cuda::Stream> created = cuda::Stream::Create();
    if (!created.ok()) return created.status();
    *stream = std::move(*created);
  }
  std::vector<cuda::Event*> events = {&kernels_done_};
  for (size_t r = 0; r < kMaxRegions; ++r) {
    events.push_back(&region_ready_[r]);
    events.push_back(&region_free_[r]);
  }
  for (cuda::Event* event : events) {
    Result<cuda::Event> created = cuda::Event::Create(cuda::Event::Wait::kSpin);
    if (!created.ok()) return created.status();
    *event = std::move(*created);
  }
  Result<cuda::Event> started =
      cuda::Event::Create(cuda::Event::Wait::kSpin, cuda::Event::Timing::kOn);
  if (!started.ok()) return started.status();
  started_ = std::move(*started);
  Result<cuda::Event> done =
      cuda::Event::Create(cuda::Event::Wait::kBlock, cuda::Event::Timing::kOn);
  if (!done.ok()) return done.status();
  done_ = std::move(*done);
  return Status::Ok();
}

Result<const LayerAddresses*> CudaLaneCore::Begin(const CopyLayout& layout) {
  start_ = std::chrono::steady_clock::now();
  traced_steps_ = 0;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  // Between two copies nothing is in flight: an entry the cache drops here
  // is read by no copy.
  const LayerAddresses* addresses = addresses_.Find(layout.registration_id);
  if (addresses == nullptr) {
    Result<LayerAddresses> uploaded = LayerAddresses::Upload(layout.groups, kernel_stream_.get());
    if (!uploaded.ok()) return uploaded.status();
    addresses = &addresses_.Insert(layout.registration_id, std::move(*uploaded));
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(started_.get(), kernel_stream_.get()));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), started_.get(), 0));
  return addresses;
}

Result<std::vector<uint8_t*>> CudaLaneCore::DeviceFlats(
    const std::vector<kernels::ChunkCopy>& chunks) const {
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
  return flats;
}

std::vector<uint8_t*> CudaLaneCore::StagingSlots(size_t chunks, size_t per_region, size_t regions,
                                                 uint64_t chunk_bytes) const {
  std::vector<uint8_t*> flats(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    const size_t region = (i / per_region) % regions;
    flats[i] = staging_.data() + (region * per_region + i % per_region) * chunk_bytes;
  }
  return flats;
}

Status CudaLaneCore::SignalSlot(const CopySignal& signal, uint32_t slot) {
  // After every earlier write of the stream (the scatter's): whoever sees
  // the value sees the data.
  return cuda::StreamWriteBoardWord(kernel_stream_.get(), signal.board->device_value(slot),
                                    signal.sequence);
}

Status CudaLaneCore::Launch(const LayerAddresses& addresses, const LayerSlices& slices,
                            size_t begin, size_t count, size_t trace_step) {
  const kernels::DeviceChunkBatch batch = plan_.Slice(begin, count);
  cudaStream_t stream = kernel_stream_.get();
  KVSTASH_RETURN_IF_ERROR(trace_.Mark(stream, trace_step, LaneTrace::Stage::kKernel, true));
  KVSTASH_RETURN_IF_ERROR(LaunchGroups(addresses, slices, batch, stream));
  traced_steps_ = std::max(traced_steps_, trace_step + 1);
  return trace_.Mark(stream, trace_step, LaneTrace::Stage::kKernel, false);
}

Status CudaLaneCore::LaunchGroups(const LayerAddresses& addresses, const LayerSlices& slices,
                                  const kernels::DeviceChunkBatch& batch,
                                  cudaStream_t stream) const {
  for (size_t g = 0; g < slices.size(); ++g) {
    const auto [first, layers] = slices[g];
    if (layers == 0) continue;
    const kernels::PreparedGroup group = addresses.Slice(g, first, layers);
    KVSTASH_RETURN_IF_ERROR(store() ? kernels::GatherChunks(group, batch, stream, max_ctas_)
                                    : kernels::ScatterChunks(group, batch, stream, max_ctas_));
  }
  return Status::Ok();
}

Status CudaLaneCore::CopySlots(const std::vector<kernels::ChunkCopy>& chunks,
                               const std::vector<uint32_t>& slabs,
                               const std::vector<uint8_t*>& flats, size_t begin, size_t end,
                               uint64_t chunk_bytes, size_t trace_step, const Windows& windows) {
  const bool to_host = store();
  cudaStream_t stream = copy_stream_.get();
  KVSTASH_RETURN_IF_ERROR(trace_.Mark(stream, trace_step, LaneTrace::Stage::kCopy, true));
  const Windows whole = {{0, chunk_bytes}};
  const Windows& spans = windows.empty() ? whole : windows;
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
            to_host ? cudaMemcpyAsync(slot, staging, bytes, cudaMemcpyDeviceToHost, stream)
                    : cudaMemcpyAsync(staging, slot, bytes, cudaMemcpyHostToDevice, stream));
      } else {  // the same window of each chunk of the run: one 2D copy
        KVSTASH_CUDA_RETURN_IF_ERROR(
            to_host ? cudaMemcpy2DAsync(slot, chunk_bytes, staging, chunk_bytes, width, rows,
                                        cudaMemcpyDeviceToHost, stream)
                    : cudaMemcpy2DAsync(staging, chunk_bytes, slot, chunk_bytes, width, rows,
                                        cudaMemcpyHostToDevice, stream));
      }
    }
    first = last;
  }
  return trace_.Mark(stream, trace_step, LaneTrace::Stage::kCopy, false);
}

void CudaLaneCore::Enqueued() {
  uint64_t plan_bytes = plan_.device_bytes();
  addresses_.ForEach([&](const LayerAddresses& a) { plan_bytes += a.device_bytes(); });
  plan_bytes_.store(plan_bytes, std::memory_order_relaxed);
  enqueued_ = std::chrono::steady_clock::now();
  // Tracing: when the GPU reached the start event, on the host clock (no
  // earlier than `enqueued_`): how long the GPU took to start this copy.
  gpu_began_ = enqueued_;
  if (trace_.enabled()) {
    while (cudaEventQuery(started_.get()) == cudaErrorNotReady) {
    }
    (void)cudaGetLastError();
    gpu_began_ = std::chrono::steady_clock::now();
  }
}

Status CudaLaneCore::Drain(uint64_t bytes) {
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernels_done_.get(), kernel_stream_.get()));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), kernels_done_.get(), 0));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_.get(), copy_stream_.get()));
  if (options_.wait == CompletionWait::kPoll) return Poll(bytes);
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_.get()));
  return Status::Ok();
}

Status CudaLaneCore::Poll(uint64_t bytes) {
  using std::chrono::microseconds;
  // Short sleeps on this thread end when asked, not up to 50 us later.
  thread_local const bool fine_timer_slack = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
  (void)fine_timer_slack;
  const auto shortest = std::chrono::nanoseconds(uint64_t(double(bytes) / bytes_per_ns_));
  std::this_thread::sleep_until(start_ + shortest * 19 / 20);
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

Status CudaLaneCore::Finished(size_t chunks, uint64_t bytes) {
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
      return std::chrono::duration_cast<std::chrono::microseconds>(t - start_).count();
    };
    logger->debug(
        "{} of {} chunks, {} bytes: enqueued after {} us, GPU began by {} us, {:.0f} us on "
        "the GPU, lane awake after {} us; GPU steps (us): {}; began at {} ns",
        store() ? "store" : "retrieve", chunks, bytes, us(enqueued_), us(gpu_began_),
        double(gpu_ms) * 1000, us(woke), trace_.Report(started_.get(), traced_steps_),
        std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count());
  }
  return Status::Ok();
}

}  // namespace kvstash::backends
