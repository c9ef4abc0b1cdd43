// The one helper through which kvstash checks CUDA runtime calls: a failure
// becomes a DeviceError naming the call, the error's name and its text.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kvstash/status.h"

namespace kvstash::cuda {

inline Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  // Reported here, once: clear a non-sticky error so that the next launch
  // check (cudaGetLastError) does not report it again.
  (void)cudaGetLastError();
  return Status::DeviceError(std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                             cudaGetErrorString(error) + ")");
}

}  // namespace kvstash::cuda

// Returns the failure of a CUDA runtime call, named by its source text.
#define KVSTASH_CUDA_RETURN_IF_ERROR(call) \
  KVSTASH_RETURN_IF_ERROR(::kvstash::cuda::CudaStatus((call), #call))
