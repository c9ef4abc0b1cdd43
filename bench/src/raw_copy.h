// The hardware's raw figures that `kvstash bench --backend cuda` compares
// against: plain cudaMemcpyAsync between pinned host memory and the GPU, one
// way or both at once on two streams, timed on the host clock around issue
// and completion, as a kvstash request is.
//
// Not thread-safe.
#pragma once

#include <cstdint>

#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/streams.h"

namespace kvstash::bench {

class RawCopy {
 public:
  enum class Way { kDeviceToHost, kHostToDevice, kBoth };
  // Buffers of `bytes` in each direction; larger copies repeat them.
  static Result<RawCopy> Create(uint64_t bytes);
  // Seconds of one copy of `bytes` (each way, for kBoth).
  Result<double> Seconds(Way way, uint64_t bytes);
  // Median seconds of `reps` such copies, after one untimed.
  Result<double> MedianSeconds(Way way, uint64_t bytes, int reps);

 private:
  RawCopy() = default;
  Status Run(Way way, uint64_t bytes);

  cuda::PinnedHostBuffer host_out_, host_in_;
  cuda::DeviceBuffer device_out_, device_in_;
  cuda::Stream down_, up_;
};

}  // namespace kvstash::bench
