// Where a copy lane's GPU time goes: timing events around the kernel and the
// copy of each sub-batch, reported relative to the batch's start. For
// --log-level debug only (timing events cost a little on every record).
//
// Owned by one copy lane and used by its thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kvstash/cuda/streams.h"
#include "kvstash/status.h"

namespace kvstash::backends {

class LaneTrace {
 public:
  enum class Stage { kKernel = 0, kCopy = 1 };
  static constexpr size_t kMaxSteps = 16;  // sub-batches traced per batch

  // Creates the events on the current device.
  Status Enable();
  bool enabled() const { return !events_.empty(); }
  // Records the begin or end of `stage` of sub-batch `step` on `stream`;
  // does nothing when disabled or past kMaxSteps.
  Status Mark(cudaStream_t stream, size_t step, Stage stage, bool begin);
  // "k 0-28 c 28-655 | k 28-57 c 655-1290 | ..." in microseconds since
  // `start`, for the steps marked since the last report. Call after the
  // batch completed.
  std::string Report(cudaEvent_t start, size_t steps);

 private:
  cuda::Event& At(size_t step, Stage stage, bool begin) {
    return events_[step * 4 + size_t(stage) * 2 + (begin ? 0 : 1)];
  }
  std::vector<cuda::Event> events_;
};

}  // namespace kvstash::backends
