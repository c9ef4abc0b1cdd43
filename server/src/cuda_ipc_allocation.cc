// cudaIpcOpenMemHandle, verified by cuMemGetAddressRange.
#include "cuda_ipc_allocation.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/devices.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::server {

namespace {

class IpcAllocation : public MappedAllocation {
 public:
  IpcAllocation(uint8_t* base, uint64_t size, int device,
                std::shared_ptr<std::atomic<int64_t>> open_count)
      : base_(base), size_(size), device_(device), open_count_(std::move(open_count)) {
    open_count_->fetch_add(1);
  }
  ~IpcAllocation() override {
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(base_);
    open_count_->fetch_sub(1);
  }
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return device_; }

 private:
  uint8_t* const base_;
  const uint64_t size_;
  const int device_;
  const std::shared_ptr<std::atomic<int64_t>> open_count_;
};

}  // namespace

Result<std::shared_ptr<MappedAllocation>> OpenIpcAllocation(
    const AllocationSpec& spec, int device, std::shared_ptr<std::atomic<int64_t>> open_count) {
  const std::string what = "the CUDA IPC allocation of " + std::to_string(spec.size_bytes) +
                           " bytes on " + cuda::UuidText(spec.gpu_uuid);
  cudaIpcMemHandle_t handle{};
  if (spec.ipc_handle.size() != sizeof(handle.reserved)) {
    return Status::InvalidArgument(what + " has a " + std::to_string(spec.ipc_handle.size()) +
                                   "-byte handle, not " + std::to_string(sizeof(handle.reserved)));
  }
  std::memcpy(handle.reserved, spec.ipc_handle.data(), sizeof(handle.reserved));
  Result<const cuda::DriverApi*> driver = cuda::Driver();
  if (!driver.ok()) return driver.status();
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));

  void* opened = nullptr;
  const Status open =
      cuda::CudaStatus(cudaIpcOpenMemHandle(&opened, handle, cudaIpcMemLazyEnablePeerAccess),
                       "cudaIpcOpenMemHandle");
  if (!open.ok()) {
    return Status::InvalidArgument("cannot open " + what + ": " + open.message() +
                                   " (is the engine process alive, and the handle from "
                                   "cudaIpcGetMemHandle of a cudaMalloc allocation?)");
  }
  // A handle names a whole allocation: compare the size the engine declared
  // with the real one before trusting any extent checked against it.
  CUdeviceptr base = 0;
  size_t size = 0;
  const Status range = cuda::DriverStatus(
      (*driver)->MemGetAddressRange(&base, &size, CUdeviceptr(opened)), "cuMemGetAddressRange");
  // Bytes from the opened address to the end of the allocation.
  const uint64_t usable = range.ok() ? base + size - CUdeviceptr(opened) : 0;
  if (!range.ok() || usable < spec.size_bytes) {
    cudaIpcCloseMemHandle(opened);
    if (!range.ok()) return range;
    return Status::OutOfRange(what + " holds " + std::to_string(usable) + " bytes, not the " +
                              std::to_string(spec.size_bytes) + " bytes declared");
  }
  return std::shared_ptr<MappedAllocation>(std::make_shared<IpcAllocation>(
      static_cast<uint8_t*>(opened), usable, device, std::move(open_count)));
}

}  // namespace kvstash::server
