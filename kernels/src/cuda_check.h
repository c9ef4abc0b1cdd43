// The one helper through which kernels/ checks CUDA calls: a failure becomes a
// DeviceError naming the call and cudaGetErrorString.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kvstash/status.h"

namespace kvstash::kernels::internal {

inline Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::DeviceError(std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                             cudaGetErrorString(error) + ")");
}

}  // namespace kvstash::kernels::internal

