// Driver API entry points, reached through the runtime
// (cudaGetDriverEntryPointByVersion) so that no kvstash binary links libcuda:
// every binary loads on a machine without a GPU or driver, and "no driver"
// is a Status there, not a loader error.
#pragma once

#include <cuda.h>  // types and prototypes only; nothing here links libcuda

#include "kvstash/status.h"

namespace kvstash::cuda {

// Immutable once resolved; safe to share between threads.
struct DriverApi {
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuMemGetAddressRange) MemGetAddressRange = nullptr;
  decltype(&::cuPointerGetAttribute) PointerGetAttribute = nullptr;
  decltype(&::cuMemRetainAllocationHandle) MemRetainAllocationHandle = nullptr;
  // The virtual memory API, whose allocations CUDA IPC cannot share.
  decltype(&::cuMemCreate) MemCreate = nullptr;
  decltype(&::cuMemRelease) MemRelease = nullptr;
  decltype(&::cuMemAddressReserve) MemAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) MemAddressFree = nullptr;
  decltype(&::cuMemMap) MemMap = nullptr;
  decltype(&::cuMemUnmap) MemUnmap = nullptr;
  decltype(&::cuMemSetAccess) MemSetAccess = nullptr;
  decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity = nullptr;
  // Stream memory operations (GPU-side completion); null where the driver
  // lacks them: StreamMemOps() then says so.
  decltype(&::cuStreamWriteValue32) StreamWriteValue32 = nullptr;
  decltype(&::cuStreamWaitValue32) StreamWaitValue32 = nullptr;
};

// Resolved on first use, once per process. Unavailable when there is no
// driver or it lacks one of the entry points.
Result<const DriverApi*> Driver();

// The driver, where it has the stream memory operations of GPU-side
// completion (cuStreamWriteValue32 / cuStreamWaitValue32); Unavailable,
// naming what is missing, otherwise.
Result<const DriverApi*> StreamMemOps();

// "cuMemGetAddressRange failed: CUDA_ERROR_INVALID_VALUE" as a DeviceError.
Status DriverStatus(CUresult result, const char* call);

}  // namespace kvstash::cuda

// Returns the failure of a driver call made through Driver().
#define KVSTASH_CU_RETURN_IF_ERROR(call) \
  KVSTASH_RETURN_IF_ERROR(::kvstash::cuda::DriverStatus((call), #call))
