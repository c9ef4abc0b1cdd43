// Completion boards on devices, through the runtime and the driver's entry
// points (no libcuda at link time).
#include "kvstash/cuda/board_device.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::cuda {

Result<uint8_t*> MapBoard(uint8_t* base, uint64_t bytes, int device) {
  KVSTASH_RETURN_IF_ERROR(StreamMemOps().status());
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  void* mapped = nullptr;
  const cudaError_t got = cudaHostGetDevicePointer(&mapped, base, 0);
  if (got != cudaSuccess) {
    cudaHostUnregister(base);
    return CudaStatus(got, "cudaHostGetDevicePointer");
  }
  return static_cast<uint8_t*>(mapped);
}

void UnmapBoard(uint8_t* base) { cudaHostUnregister(base); }

Status StreamWaitBoardWord(void* stream, uint64_t device_word, uint32_t value) {
  Result<const DriverApi*> api = StreamMemOps();
  if (!api.ok()) return api.status();
  return DriverStatus((*api)->StreamWaitValue32(static_cast<CUstream>(stream), device_word, value,
                                                CU_STREAM_WAIT_VALUE_GEQ),
                      "cuStreamWaitValue32");
}

Status StreamWriteBoardWord(void* stream, uint64_t device_word, uint32_t value) {
  Result<const DriverApi*> api = StreamMemOps();
  if (!api.ok()) return api.status();
  // Default flags: ordered after every earlier write of the stream.
  return DriverStatus(
      (*api)->StreamWriteValue32(static_cast<CUstream>(stream), device_word, value, 0),
      "cuStreamWriteValue32");
}

}  // namespace kvstash::cuda
