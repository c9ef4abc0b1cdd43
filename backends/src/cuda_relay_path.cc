// A GPU's streams, events and staging for carrying one direction of its
// peers' copies.
#include "cuda_relay_path.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

Result<std::unique_ptr<CudaRelayPath>> CudaRelayPath::Create(int device, Direction direction,
                                                             uint64_t staging_bytes) {
  std::unique_ptr<CudaRelayPath> path(new CudaRelayPath(device, direction));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  for (cuda::Stream* stream : {&path->host_stream_, &path->link_stream_}) {
    Result<cuda::Stream> created = cuda::Stream::Create();
    if (!created.ok()) return created.status();
    *stream = std::move(*created);
  }
  std::vector<cuda::Event*> events = {&path->host_done_, &path->link_done_};
  for (size_t r = 0; r < kMaxRegions; ++r) {
    events.push_back(&path->landed_[r]);
    events.push_back(&path->pulled_[r]);
    events.push_back(&path->freed_[r]);
  }
  for (cuda::Event* event : events) {
    Result<cuda::Event> created = cuda::Event::Create(cuda::Event::Wait::kSpin);
    if (!created.ok()) return created.status();
    *event = std::move(*created);
  }
  if (staging_bytes == 0) return path;
  Result<cuda::DeviceBuffer> staging = cuda::DeviceBuffer::Allocate(staging_bytes);
  if (!staging.ok()) {
    return Status::Exhausted(
        "cannot allocate " + std::to_string(staging_bytes >> 20) + " MiB of multi-path " +
        (direction == Direction::kStore ? "store" : "retrieve") + " staging on GPU " +
        std::to_string(device) + ": " + staging.status().message() +
        "; lower --multipath-staging-mb or use --multipath off");
  }
  path->staging_ = std::move(*staging);
  return path;
}

bool CudaRelayPath::TryAcquire() {
  if (failed()) return false;
  bool expected = false;
  // acquire: what the last holder enqueued is ordered before our use.
  return held_.compare_exchange_strong(expected, true, std::memory_order_acquire);
}

void CudaRelayPath::Release() { held_.store(false, std::memory_order_release); }

void CudaRelayPath::Fail(const Status& why) {
  {
    MutexLock lock(mutex_);
    if (failure_.empty()) failure_ = why.ToString();
  }
  failed_.store(true, std::memory_order_release);
}

std::string CudaRelayPath::failure() const {
  MutexLock lock(mutex_);
  return failure_;
}

}  // namespace kvstash::backends
