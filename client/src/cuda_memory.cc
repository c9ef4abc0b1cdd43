// AddCudaLayers with CUDA: allocation bases from cuMemGetAddressRange, IPC
// handles from cudaIpcGetMemHandle, the GPU's UUID from its properties.
#include "kvstash/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/devices.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash {

namespace {

struct Located {
  CUdeviceptr base = 0;
  uint64_t size = 0;
  int device = 0;
};

std::string Address(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

const char* MemoryTypeName(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeManaged: return "managed memory (cudaMallocManaged)";
    case cudaMemoryTypeUnregistered: return "ordinary host memory";
    default: return "device memory";
  }
}

// Why memory that CUDA reports as device memory cannot go through legacy IPC.
std::string NotShareable(const cuda::DriverApi& driver, const void* p, const std::string& where) {
  std::string cause =
      "memory that legacy CUDA IPC cannot share (a stream-ordered pool from "
      "cudaMallocAsync or cudaMemPool?)";
  CUmemGenericAllocationHandle handle = 0;
  if (driver.MemRetainAllocationHandle(&handle, const_cast<void*>(p)) == CUDA_SUCCESS) {
    driver.MemRelease(handle);
    cause =
        "memory from the CUDA virtual memory API (cuMemCreate + cuMemMap), which is how "
        "PyTorch's expandable segments allocate";
  }
  return where + " lives in " + cause +
         "; cudaIpcGetMemHandle cannot share it with kvstashd. Allocate the KV cache with "
         "cudaMalloc: under PyTorch set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False before "
         "the cache is allocated (or give the cache its own cudaMalloc allocation)";
}

Result<Located> Locate(const cuda::DriverApi& driver, const void* p, const std::string& where) {
  if (p == nullptr) return Status::InvalidArgument(where + " is null");
  cudaPointerAttributes attributes{};
  const Status queried =
      cuda::CudaStatus(cudaPointerGetAttributes(&attributes, p), "cudaPointerGetAttributes");
  if (!queried.ok()) return Status::InvalidArgument(where + ": " + queried.message());
  if (attributes.type != cudaMemoryTypeDevice) {
    return Status::InvalidArgument(where + " is " + MemoryTypeName(attributes.type) +
                                   ", not GPU memory from cudaMalloc");
  }
  int capable = 1;
  if (driver.PointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CUdeviceptr(p)) == CUDA_SUCCESS &&
      !capable) {
    return Status::InvalidArgument(NotShareable(driver, p, where));
  }
  Located found;
  size_t size = 0;
  const Status range = cuda::DriverStatus(
      driver.MemGetAddressRange(&found.base, &size, CUdeviceptr(p)), "cuMemGetAddressRange");
  if (!range.ok()) return Status::InvalidArgument(where + ": " + range.message());
  found.size = size;
  found.device = attributes.device;
  return found;
}

Result<CudaIpc> Share(const cuda::DriverApi& driver, const Located& allocation,
                      const cuda::GpuUuid& uuid, const std::string& where) {
  cudaIpcMemHandle_t handle{};
  void* base = reinterpret_cast<void*>(allocation.base);
  const Status got = cuda::CudaStatus(cudaIpcGetMemHandle(&handle, base), "cudaIpcGetMemHandle");
  if (!got.ok()) {
    // The capability attribute said yes (or was unknown); report both.
    return Status::InvalidArgument(got.message() + "; " + NotShareable(driver, base, where));
  }
  CudaIpc ipc;
  static_assert(sizeof(handle.reserved) == sizeof(ipc.ipc_handle));
  std::memcpy(ipc.ipc_handle.data(), handle.reserved, ipc.ipc_handle.size());
  ipc.size_bytes = allocation.size;
  ipc.gpu_uuid = uuid;
  return ipc;
}

// Index of `ipc` in allocations, appended when it is not there yet.
uint32_t IndexOf(std::vector<Allocation>& allocations, const CudaIpc& ipc) {
  for (size_t i = 0; i < allocations.size(); ++i) {
    const CudaIpc* existing = std::get_if<CudaIpc>(&allocations[i]);
    if (existing && existing->ipc_handle == ipc.ipc_handle) return uint32_t(i);
  }
  allocations.push_back(ipc);
  return uint32_t(allocations.size() - 1);
}

}  // namespace

Status AddCudaLayers(const std::vector<CudaLayer>& layers, RegisterOptions& options) {
  Result<const cuda::DriverApi*> driver = cuda::Driver();
  if (!driver.ok())
    return Status::Unavailable("cannot register GPU memory: " + driver.status().message());
  RegisterOptions out = options;  // options stays as it was on error
  std::map<CUdeviceptr, uint32_t> index_of_base;
  int device = -1;
  cuda::GpuUuid uuid{};  // of `device`
  for (size_t i = 0; i < layers.size(); ++i) {
    const CudaLayer& layer = layers[i];
    const std::string where = "layer " + std::to_string(i) + " at " + Address(layer.data);
    Result<Located> located = Locate(**driver, layer.data, where);
    if (!located.ok()) return located.status();
    if (device >= 0 && located->device != device) {
      return Status::InvalidArgument(where + " is on GPU " + std::to_string(located->device) +
                                     " but earlier layers are on GPU " + std::to_string(device) +
                                     "; register each GPU's layers separately (one registration "
                                     "per engine rank)");
    }
    if (device != located->device) {
      Result<cuda::GpuUuid> found = cuda::DeviceUuid(located->device);
      if (!found.ok()) return found.status();
      uuid = *found;
      device = located->device;
    }
    const uint64_t offset = uint64_t(CUdeviceptr(layer.data) - located->base);
    const uint64_t extent = LayerExtentBytes(layer.geometry);
    if (extent > located->size - offset) {
      return Status::OutOfRange(where + " spans " + std::to_string(extent) + " bytes from offset " +
                                std::to_string(offset) + " of an allocation of " +
                                std::to_string(located->size) + " bytes");
    }
    auto known = index_of_base.find(located->base);
    if (known == index_of_base.end()) {
      Result<CudaIpc> ipc = Share(**driver, *located, uuid, where);
      if (!ipc.ok()) return ipc.status();
      known = index_of_base.emplace(located->base, IndexOf(out.allocations, *ipc)).first;
    }
    out.layers.push_back(LayerDesc{known->second, offset, layer.geometry});
  }
  options = std::move(out);
  return Status::Ok();
}

}  // namespace kvstash
