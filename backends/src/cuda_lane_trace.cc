// Sub-batch timing events.
#include "cuda_lane_trace.h"

#include <algorithm>
#include <cstdio>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

Status LaneTrace::Enable() {
  std::vector<cuda::Event> events;
  for (size_t i = 0; i < kMaxSteps * 4; ++i) {
    Result<cuda::Event> event =
        cuda::Event::Create(cuda::Event::Wait::kSpin, cuda::Event::Timing::kOn);
    if (!event.ok()) return event.status();
    events.push_back(std::move(*event));
  }
  events_ = std::move(events);
  return Status::Ok();
}

Status LaneTrace::Mark(cudaStream_t stream, size_t step, Stage stage, bool begin) {
  if (!enabled() || step >= kMaxSteps) return Status::Ok();
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(At(step, stage, begin).get(), stream));
  return Status::Ok();
}

std::string LaneTrace::Report(cudaEvent_t start, size_t steps) {
  std::string text;
  if (!enabled()) return text;
  auto since = [&](cuda::Event& e) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start, e.get()) == cudaSuccess) return double(ms) * 1000;
    // A stage this batch never marked (direct mode has no copies): clear
    // the error, or the next launch's cudaGetLastError would report it.
    (void)cudaGetLastError();
    return -1.0;
  };
  for (size_t s = 0; s < std::min(steps, kMaxSteps); ++s) {
    char line[96];
    std::snprintf(line, sizeof(line), "%sk %.0f-%.0f c %.0f-%.0f", s ? " | " : "",
                  since(At(s, Stage::kKernel, true)), since(At(s, Stage::kKernel, false)),
                  since(At(s, Stage::kCopy, true)), since(At(s, Stage::kCopy, false)));
    text += line;
  }
  return text;
}

}  // namespace kvstash::backends
