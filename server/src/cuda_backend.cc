// GPUs, IPC allocations, pinned slabs and the per-device copy lanes.
#include "cuda_backend.h"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <nlohmann/json.hpp>

#include "cuda_ipc_allocation.h"
#include "daemon_logger.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::server {

Result<std::unique_ptr<Backend>> CudaBackend::Create(const config::ServerConfig& config) {
  Result<int> count = cuda::DeviceCount();
  if (!count.ok()) return count.status();
  // Resolve the driver entry points now: a driver too old fails at startup.
  Result<const cuda::DriverApi*> driver = cuda::Driver();
  if (!driver.ok()) return driver.status();
  const TransferMode mode = config.transfer_mode;
  const CompletionWait wait = config.completion_wait;
  std::unique_ptr<CudaBackend> backend(new CudaBackend(mode, wait));
  // Each direction gets half of the device's ring.
  const uint64_t staging_per_lane = (uint64_t(config.staging_mb) << 20) / 2;
  for (int d = 0; d < *count; ++d) {
    Device device;
    device.ordinal = d;
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    // Waits sleep instead of spinning a core; kernels may map host memory.
    // Fails harmlessly where this device's context already runs.
    const cudaError_t flags =
        cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost);
    if (flags != cudaSuccess) (void)cudaGetLastError();
    cudaDeviceProp properties{};
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, d));
    device.name = properties.name;
    std::copy(properties.uuid.bytes, properties.uuid.bytes + 16, device.uuid.begin());
    int same_address = 0;
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&same_address, cudaDevAttrCanUseHostPointerForRegisteredMem, d));
    CudaCopyLane::Options options;
    options.device = d;
    options.mode = mode;
    options.staging_bytes = staging_per_lane;
    options.host_pointers_on_device = same_address != 0;
    options.wait = wait;
    options.busy_poll = config.busy_poll_us > 0;
    options.trace = config.log_level == "debug" || config.log_level == "trace";
    for (Direction direction : {Direction::kStore, Direction::kRetrieve}) {
      options.direction = direction;
      Result<std::unique_ptr<CudaCopyLane>> lane = CudaCopyLane::Create(options);
      if (!lane.ok()) return lane.status();
      (direction == Direction::kStore ? device.store : device.retrieve) = std::move(*lane);
    }
    Logger()->info("GPU {} {} ({}): {} mode, {} MiB staging", d, device.name,
                   cuda::UuidText(device.uuid), NameOf(mode),
                   mode == TransferMode::kDma ? config.staging_mb : 0);
    backend->devices_.push_back(std::move(device));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

CudaBackend::~CudaBackend() = default;

Result<std::shared_ptr<MappedAllocation>> CudaBackend::Open(const AllocationSpec& spec) {
  if (spec.kind != AllocationSpec::Kind::kCudaIpc) {
    return Status::InvalidArgument(
        "the cuda backend takes CUDA IPC handles, not POSIX shared memory; register GPU memory "
        "(kvstash/cuda_memory.h), or start kvstashd with --backend host");
  }
  Result<int> device = cuda::DeviceWithUuid(spec.gpu_uuid, "kvstashd");
  if (!device.ok()) return device.status();
  return OpenIpcAllocation(spec, *device, ipc_open_);
}

SlabHooks CudaBackend::slab_hooks() {
  SlabHooks hooks;
  // Runs on the pool's preparer threads, in parallel, in the background.
  hooks.prepare = [](uint8_t* data, uint64_t bytes) {
    // Huge pages, where the kernel gives them: the GPU maps pinned memory
    // with fewer, larger pages, so copies and kernels miss its TLB less.
    // A hint: without THP the pages stay 4 KiB and everything still works.
    madvise(data, bytes, MADV_HUGEPAGE);
    const Status pinned = cuda::CudaStatus(
        cudaHostRegister(data, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped),
        "cudaHostRegister");
    if (!pinned.ok()) {
      Logger()->warn("cannot pin an L1 slab of {} bytes: {}", bytes, pinned.message());
      return pinned;
    }
    return Status::Ok();
  };
  hooks.release = [](uint8_t* data, uint64_t /*bytes*/) { cudaHostUnregister(data); };
  return hooks;
}

Status CudaBackend::CheckRegistration(int device, const std::vector<GroupAddresses>& /*groups*/,
                                      uint64_t chunk_bytes) const {
  if (device < 0 || device >= num_devices()) {
    return Status::Internal("registration on unknown device " + std::to_string(device));
  }
  const uint64_t staging = devices_[size_t(device)].store->staging_bytes();
  if (mode_ == TransferMode::kDma && chunk_bytes > staging) {
    return Status::TooLarge(
        "a chunk of this layout takes " + std::to_string(chunk_bytes) + " bytes, more than the " +
        std::to_string(staging) +
        " bytes of staging ring per direction; raise --staging-mb to at least " +
        std::to_string((2 * chunk_bytes + (1 << 20) - 1) >> 20) + " or use --transfer-mode direct");
  }
  return Status::Ok();
}

Status CudaBackend::Copy(Direction direction, int device, const CopyLayout& layout,
                         const std::vector<kernels::ChunkCopy>& chunks,
                         const std::vector<uint32_t>& slabs, CopyDeadlines& deadlines,
                         const CopySignal* signal) {
  const Device& d = devices_.at(size_t(device));
  return (direction == Direction::kStore ? *d.store : *d.retrieve)
      .Copy(layout, chunks, slabs, deadlines, signal);
}

Result<BoardMapping> CudaBackend::MapBoard(int device, uint8_t* base, uint64_t bytes) {
  KVSTASH_RETURN_IF_ERROR(cuda::StreamMemOps().status());
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  void* mapped = nullptr;
  const cudaError_t got = cudaHostGetDevicePointer(&mapped, base, 0);
  if (got != cudaSuccess) {
    cudaHostUnregister(base);
    return cuda::CudaStatus(got, "cudaHostGetDevicePointer");
  }
  return BoardMapping{static_cast<uint8_t*>(mapped), [base] { cudaHostUnregister(base); }};
}

void CudaBackend::Describe(nlohmann::json& out) const {
  uint64_t gpu_bytes = 0;
  nlohmann::json devices = nlohmann::json::array();
  for (const Device& d : devices_) {
    const uint64_t staging = d.store->staging_bytes() + d.retrieve->staging_bytes();
    const uint64_t plans = d.store->plan_bytes() + d.retrieve->plan_bytes();
    gpu_bytes += staging + plans;
    devices.push_back({{"device", d.ordinal},
                       {"name", d.name},
                       {"uuid", cuda::UuidText(d.uuid)},
                       {"staging_bytes", staging},
                       {"plan_bytes", plans}});  // on the GPU, and as much pinned
  }
  out["transfer_mode"] = NameOf(mode_);
  out["completion_wait"] = NameOf(wait_);
  // What kvstashd allocated on GPUs: staging and plans (its CUDA contexts
  // come on top).
  out["gpu_memory_bytes"] = gpu_bytes;
  out["ipc_allocations_open"] = ipc_open_->load();
  out["devices"] = devices;
}

}  // namespace kvstash::server
