// Completion boards on the GPU, through the runtime and the driver's entry
// points (no libcuda at link time).
#include <cuda_runtime_api.h>

#include "board_gpu.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::client {

Result<uint8_t*> MapBoardForGpu(uint8_t* base, uint64_t bytes, int gpu) {
  KVSTASH_RETURN_IF_ERROR(cuda::StreamMemOps().status());
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  void* mapped = nullptr;
  const cudaError_t got = cudaHostGetDevicePointer(&mapped, base, 0);
  if (got != cudaSuccess) {
    cudaHostUnregister(base);
    return cuda::CudaStatus(got, "cudaHostGetDevicePointer");
  }
  return static_cast<uint8_t*>(mapped);
}

void UnmapBoardForGpu(uint8_t* base) { cudaHostUnregister(base); }

Status StreamWaitWord(void* stream, uint8_t* device_word, uint32_t value) {
  Result<const cuda::DriverApi*> api = cuda::StreamMemOps();
  if (!api.ok()) return api.status();
  return cuda::DriverStatus((*api)->StreamWaitValue32(static_cast<CUstream>(stream),
                                                      reinterpret_cast<CUdeviceptr>(device_word),
                                                      value, CU_STREAM_WAIT_VALUE_GEQ),
                            "cuStreamWaitValue32");
}

Status StreamWriteWord(void* stream, uint8_t* device_word, uint32_t value) {
  Result<const cuda::DriverApi*> api = cuda::StreamMemOps();
  if (!api.ok()) return api.status();
  // Default flags: ordered after every earlier write of the stream (the
  // engine's KV), so the daemon's gather sees them.
  return cuda::DriverStatus(
      (*api)->StreamWriteValue32(static_cast<CUstream>(stream),
                                 reinterpret_cast<CUdeviceptr>(device_word), value, 0),
      "cuStreamWriteValue32");
}

}  // namespace kvstash::client
