// Kernels a GPU test enqueues on the engine's stream to observe GPU-side
// completion: a byte check that runs the moment the stream passes its wait,
// and a spin that holds a stream busy. No CUDA types here.
#pragma once

#include <cstdint>

namespace kvstash::testing {

// Adds to *mismatches (device memory) the bytes of [data, data + bytes) that
// differ from `expected`; enqueued on `stream` (a cudaStream_t).
void EnqueueCountMismatches(const uint8_t* data, uint64_t bytes, uint8_t expected,
                            unsigned long long* mismatches, void* stream);
// Keeps `stream` busy for about `microseconds`.
void EnqueueSpin(uint32_t microseconds, void* stream);

}  // namespace kvstash::testing
