// Engine GPU memory opened from a CUDA IPC handle. The allocation closes
// (cudaIpcCloseMemHandle) when its owner, shared by every registration and
// layer that uses it, goes.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "kvstash/backends/backend.h"

namespace kvstash::backends {

// Opens `spec` on `device` (the ordinal of its GPU UUID) and checks the
// declared size against the real size of the opened allocation. `open_count`
// counts allocations open at once (for describe and tests).
// `peers`: devices that also open it (multi-path copies in direct mode,
// whose kernels there write or read it over NVLink); where that fails, the
// allocation is simply not open there (base_on is null), with a warning.
Result<std::shared_ptr<MappedAllocation>> OpenIpcAllocation(
    const AllocationSpec& spec, int device, std::shared_ptr<std::atomic<int64_t>> open_count,
    const std::vector<int>& peers = {});

}  // namespace kvstash::backends
