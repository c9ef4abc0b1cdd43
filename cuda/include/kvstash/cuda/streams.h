// Owners of CUDA streams and events, created on the current device and
// destroyed with their owner. Movable, not copyable.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>

#include "kvstash/status.h"

namespace kvstash::cuda {

// A stream that does not synchronise with the legacy default stream.
class Stream {
 public:
  Stream() = default;
  static Result<Stream> Create();
  cudaStream_t get() const { return stream_.get(); }

 private:
  struct Destroy {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, Destroy> stream_;
};

// An event. A blocking one puts the thread that waits on it to sleep
// (cudaEventBlockingSync) instead of spinning on a core; a timing one can
// measure the time between two of them (cudaEventElapsedTime).
class Event {
 public:
  enum class Wait { kSpin, kBlock };
  enum class Timing { kOff, kOn };
  Event() = default;
  static Result<Event> Create(Wait wait, Timing timing = Timing::kOff);
  cudaEvent_t get() const { return event_.get(); }

 private:
  struct Destroy {
    void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, Destroy> event_;
};

}  // namespace kvstash::cuda
