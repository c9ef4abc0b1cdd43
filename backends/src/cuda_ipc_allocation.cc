// cudaIpcOpenMemHandle, verified by cuMemGetAddressRange.
#include "cuda_ipc_allocation.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "backends_logger.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/devices.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::backends {

namespace {

class IpcAllocation : public MappedAllocation {
 public:
  // on_peers: (device, address) where it is also open; closed here too.
  IpcAllocation(uint8_t* base, uint64_t size, int device,
                std::shared_ptr<std::atomic<int64_t>> open_count,
                std::vector<std::pair<int, uint8_t*>> on_peers)
      : base_(base),
        size_(size),
        device_(device),
        open_count_(std::move(open_count)),
        on_peers_(std::move(on_peers)) {
    open_count_->fetch_add(1);
  }
  ~IpcAllocation() override {
    for (const auto& [peer, address] : on_peers_) {
      cudaSetDevice(peer);
      cudaIpcCloseMemHandle(address);
    }
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(base_);
    open_count_->fetch_sub(1);
  }
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return device_; }
  uint8_t* base_on(int device) const override {
    if (device == device_) return base_;
    for (const auto& [peer, address] : on_peers_) {
      if (peer == device) return address;
    }
    return nullptr;
  }

 private:
  uint8_t* const base_;
  const uint64_t size_;
  const int device_;
  const std::shared_ptr<std::atomic<int64_t>> open_count_;
  const std::vector<std::pair<int, uint8_t*>> on_peers_;
};

}  // namespace

Result<std::shared_ptr<MappedAllocation>> OpenIpcAllocation(
    const AllocationSpec& spec, int device, std::shared_ptr<std::atomic<int64_t>> open_count,
    const std::vector<int>& peers) {
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
  // The same handle opened in each peer's context (once per device, as
  // CUDA IPC allows): there its kernels address the memory over NVLink.
  std::vector<std::pair<int, uint8_t*>> on_peers;
  for (int peer : peers) {
    void* mapped = nullptr;
    const Status peer_open =
        cuda::CudaStatus(cudaSetDevice(peer), "cudaSetDevice").ok()
            ? cuda::CudaStatus(
                  cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess),
                  "cudaIpcOpenMemHandle")
            : Status::DeviceError("cannot select GPU " + std::to_string(peer));
    if (peer_open.ok()) {
      on_peers.emplace_back(peer, static_cast<uint8_t*>(mapped));
    } else {
      Logger()->warn("{} is not opened on GPU {} ({}): retrieves into it take one path", what, peer,
                     peer_open.message());
    }
  }
  (void)cudaSetDevice(device);
  return std::shared_ptr<MappedAllocation>(std::make_shared<IpcAllocation>(
      static_cast<uint8_t*>(opened), usable, device, std::move(open_count), std::move(on_peers)));
}

}  // namespace kvstash::backends
