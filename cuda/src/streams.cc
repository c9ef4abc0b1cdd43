// Stream and event owners.
#include "kvstash/cuda/streams.h"

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::cuda {

Result<Stream> Stream::Create() {
  cudaStream_t stream = nullptr;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Stream owner;
  owner.stream_.reset(stream);
  return owner;
}

Result<Event> Event::Create(Wait wait, Timing timing) {
  cudaEvent_t event = nullptr;
  const unsigned flags = (timing == Timing::kOff ? cudaEventDisableTiming : 0u) |
                         (wait == Wait::kBlock ? cudaEventBlockingSync : 0u);
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  Event owner;
  owner.event_.reset(event);
  return owner;
}

}  // namespace kvstash::cuda
