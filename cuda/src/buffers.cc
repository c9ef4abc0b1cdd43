// Pinned host and device memory owners.
#include "kvstash/cuda/buffers.h"

#include <cuda_runtime_api.h>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::cuda {

void PinnedHostBuffer::Free::operator()(uint8_t* p) const { cudaFreeHost(p); }

Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t bytes) {
  void* host = nullptr;
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&host, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  PinnedHostBuffer buffer;
  buffer.host_.reset(static_cast<uint8_t*>(host));
  void* device = nullptr;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device, host, 0));
  buffer.device_ = static_cast<uint8_t*>(device);
  buffer.size_ = bytes;
  return buffer;
}

void DeviceBuffer::Free::operator()(uint8_t* p) const { cudaFree(p); }

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  void* data = nullptr;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
  DeviceBuffer buffer;
  buffer.data_.reset(static_cast<uint8_t*>(data));
  buffer.size_ = bytes;
  return buffer;
}

}  // namespace kvstash::cuda
