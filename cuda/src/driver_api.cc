// Resolving driver entry points through the runtime.
#include "kvstash/cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::cuda {

namespace {

// The ABI the prototypes in cuda.h describe: entry points of CUDA 12.0 are
// those of every driver we support (the CUDA 13 toolkit needs a 580+ driver).
constexpr unsigned int kEntryPointVersion = 12000;

template <typename Fn>
Status Resolve(const char* symbol, Fn& fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &address, kEntryPointVersion,
                                                             cudaEnableDefault, &found);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(std::string("no CUDA driver to resolve ") + symbol + ": " +
                               cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
  }
  if (found != cudaDriverEntryPointSuccess || address == nullptr) {
    return Status::Unavailable(
        std::string("the CUDA driver has no entry point ") + symbol +
        (found == cudaDriverEntryPointVersionNotSufficent ? " (driver too old)" : ""));
  }
  fn = reinterpret_cast<Fn>(address);
  return Status::Ok();
}

Result<DriverApi> ResolveAll() {
  DriverApi api;
  KVSTASH_RETURN_IF_ERROR(Resolve("cuGetErrorName", api.GetErrorName));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemGetAddressRange", api.MemGetAddressRange));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuPointerGetAttribute", api.PointerGetAttribute));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemRetainAllocationHandle", api.MemRetainAllocationHandle));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemCreate", api.MemCreate));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemRelease", api.MemRelease));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemAddressReserve", api.MemAddressReserve));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemAddressFree", api.MemAddressFree));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemMap", api.MemMap));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemUnmap", api.MemUnmap));
  KVSTASH_RETURN_IF_ERROR(Resolve("cuMemSetAccess", api.MemSetAccess));
  KVSTASH_RETURN_IF_ERROR(
      Resolve("cuMemGetAllocationGranularity", api.MemGetAllocationGranularity));
  // Optional: only GPU-side completion needs them (StreamMemOps).
  (void)Resolve("cuStreamWriteValue32", api.StreamWriteValue32);
  (void)Resolve("cuStreamWaitValue32", api.StreamWaitValue32);
  return api;
}

}  // namespace

Result<const DriverApi*> Driver() {
  // Resolved once; immutable afterwards (a function-local static, not
  // mutable global state).
  static const Result<DriverApi> api = ResolveAll();
  if (!api.ok()) return api.status();
  return &api.value();
}

Result<const DriverApi*> StreamMemOps() {
  Result<const DriverApi*> api = Driver();
  if (!api.ok()) return api.status();
  if ((*api)->StreamWriteValue32 == nullptr || (*api)->StreamWaitValue32 == nullptr) {
    return Status::Unavailable(
        "the CUDA driver has no stream memory operations (cuStreamWriteValue32 / "
        "cuStreamWaitValue32): GPU-side completion is not available; wait for the CPU reply");
  }
  return api;
}

Status DriverStatus(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  Result<const DriverApi*> api = Driver();
  if (api.ok()) (*api)->GetErrorName(result, &name);
  return Status::DeviceError(
      std::string(call) + " failed: " + (name ? name : "CUresult " + std::to_string(int(result))));
}

}  // namespace kvstash::cuda
