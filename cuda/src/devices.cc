// GPU identities through the runtime.
#include "kvstash/cuda/devices.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::cuda {

std::string UuidText(const GpuUuid& uuid) {
  std::string text = "GPU-";
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", uuid[i]);
    text += hex;
  }
  return text;
}

Result<int> DeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(std::string("no usable CUDA device: cudaGetDeviceCount failed: ") +
                               cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
  }
  if (count == 0) return Status::Unavailable("no usable CUDA device: cudaGetDeviceCount found 0");
  return count;
}

Result<GpuUuid> DeviceUuid(int device) {
  cudaDeviceProp properties{};
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
  GpuUuid uuid{};
  std::memcpy(uuid.data(), properties.uuid.bytes, uuid.size());
  return uuid;
}

Result<int> DeviceWithUuid(const GpuUuid& uuid, const std::string& viewer) {
  Result<int> count = DeviceCount();
  if (!count.ok()) return count.status();
  std::string seen;
  for (int device = 0; device < *count; ++device) {
    Result<GpuUuid> found = DeviceUuid(device);
    if (!found.ok()) return found.status();
    if (*found == uuid) return device;
    seen +=
        (seen.empty() ? "" : ", ") + UuidText(*found) + " (device " + std::to_string(device) + ")";
  }
  return Status::NotFound("GPU " + UuidText(uuid) + " is not visible to " + viewer +
                          ", which sees " + seen +
                          "; check CUDA_VISIBLE_DEVICES and that engine and daemon share the host");
}

}  // namespace kvstash::cuda
