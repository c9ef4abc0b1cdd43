// GPU identities: the UUID an engine sends with its IPC handles names a GPU
// the same way in every process, whatever CUDA_VISIBLE_DEVICES renumbered.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kvstash/status.h"

namespace kvstash::cuda {

using GpuUuid = std::array<uint8_t, 16>;

// "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809", as nvidia-smi -L prints it.
std::string UuidText(const GpuUuid& uuid);

// Visible CUDA devices. Unavailable, with the runtime's reason, when there
// is none (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them all).
Result<int> DeviceCount();

Result<GpuUuid> DeviceUuid(int device);

// The ordinal of the visible device with this UUID; NotFound naming the
// devices `viewer` (this process, named so in the message) sees otherwise.
Result<int> DeviceWithUuid(const GpuUuid& uuid, const std::string& viewer = "this process");

}  // namespace kvstash::cuda
