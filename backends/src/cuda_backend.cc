// GPUs, IPC allocations, pinned slabs and the per-device copy lanes.
#include "cuda_backend.h"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <nlohmann/json.hpp>

#include "backends_logger.h"
#include "cuda_ipc_allocation.h"
#include "kvstash/cuda/board_device.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/driver_api.h"

namespace kvstash::backends {

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
    options.trace = config.log_level <= config::LogLevel::kDebug;
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
  if (config.multipath == config::Multipath::kOn)
    KVSTASH_RETURN_IF_ERROR(backend->SetUpMultipath(config));
  return std::unique_ptr<Backend>(std::move(backend));
}

Status CudaBackend::SetUpMultipath(const config::ServerConfig& config) {
  const int count = num_devices();
  const auto say = [this](std::string state) {
    multipath_state_ = std::move(state);
    Logger()->info("multi-path retrieves and stores: {}", multipath_state_);
    return Status::Ok();
  };
  if (count < 2) return say("one path: one GPU visible");
  // Whatever fails here leaves fewer paths (down to one), never a daemon
  // that does not start: each copy still has its own GPU's link.
  Result<cuda::PeerTopology> topology = cuda::PeerTopology::Detect(count);
  if (!topology.ok()) return say("one path: peer links unknown: " + topology.status().message());
  topology_ = std::move(*topology);
  // Each direction gets half of a relay's staging (as of --staging-mb): a
  // store and a retrieve through one GPU never share a region.
  const uint64_t staging_per_direction =
      mode_ == TransferMode::kDma ? (uint64_t(config.multipath_staging_mb) << 20) / 2 : 0;
  store_relays_.resize(size_t(count));
  retrieve_relays_.resize(size_t(count));
  carries_for_.assign(size_t(count) * size_t(count), false);
  for (int relay = 0; relay < count; ++relay) {
    for (int target = 0; target < count; ++target) {
      if (!topology_->CanRelay(relay, target)) continue;
      Status enabled = cuda::EnablePeerAccess(relay, target);
      if (enabled.ok()) enabled = cuda::EnablePeerAccess(target, relay);
      if (!enabled.ok()) {
        Logger()->warn("GPU {} will not carry copies for GPU {}: {}", relay, target,
                       enabled.message());
        continue;
      }
      if (retrieve_relays_[size_t(relay)] == nullptr) {
        Result<std::unique_ptr<CudaRelayPath>> retrieves =
            CudaRelayPath::Create(relay, Direction::kRetrieve, staging_per_direction);
        Result<std::unique_ptr<CudaRelayPath>> stores =
            retrieves.ok() ? CudaRelayPath::Create(relay, Direction::kStore, staging_per_direction)
                           : retrieves.status();
        if (!stores.ok()) {
          Logger()->warn("GPU {} will not carry copies for its peers: {}", relay,
                         stores.status().message());
          break;
        }
        retrieve_relays_[size_t(relay)] = std::move(*retrieves);
        store_relays_[size_t(relay)] = std::move(*stores);
      }
      carries_for_[size_t(relay) * size_t(count) + size_t(target)] = true;
    }
  }
  loads_ = std::make_unique<LinkLoads>(count);
  int linked_targets = 0;
  for (int target = 0; target < count; ++target) {
    for (Direction direction : {Direction::kStore, Direction::kRetrieve}) {
      CudaCopyLane::Relays relays;
      relays.loads = loads_.get();
      relays.policy.min_path_bytes = uint64_t(config.multipath_min_path_kib) << 10;
      relays.piece_bytes = uint64_t(config.multipath_piece_kib) << 10;
      const auto& paths = direction == Direction::kStore ? store_relays_ : retrieve_relays_;
      for (int relay = 0; relay < count; ++relay) {
        if (CarriesFor(relay, target)) relays.paths.push_back(paths[size_t(relay)].get());
      }
      if (direction == Direction::kRetrieve) linked_targets += relays.paths.empty() ? 0 : 1;
      Device& d = devices_[size_t(target)];
      (direction == Direction::kStore ? d.store : d.retrieve)->SetRelays(std::move(relays));
    }
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  return say(linked_targets > 0
                 ? "on: " + std::to_string(linked_targets) + " of " + std::to_string(count) +
                       " GPUs have NVLink peers to carry their retrieves and stores"
                 : "one path: no two GPUs have NVLink and peer access");
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
  // Direct-mode multi-path: the relays' kernels write (retrieves) and read
  // (stores) this memory, so it is opened on each of them too.
  std::vector<int> peers;
  if (mode_ == TransferMode::kDirect && topology_) {
    for (size_t h = 0; h < retrieve_relays_.size(); ++h) {
      if (CarriesFor(int(h), *device)) peers.push_back(int(h));
    }
  }
  return OpenIpcAllocation(spec, *device, ipc_open_, peers);
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
  Result<uint8_t*> mapped = cuda::MapBoard(base, bytes, device);
  if (!mapped.ok()) return mapped.status();
  return BoardMapping{*mapped, [base] { cuda::UnmapBoard(base); }};
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
  nlohmann::json multipath = {{"state", multipath_state_}};
  if (topology_) {
    nlohmann::json links = nlohmann::json::array();
    for (int from = 0; from < topology_->devices(); ++from) {
      for (int to = from + 1; to < topology_->devices(); ++to) {
        const cuda::PeerLink& link = topology_->link(from, to);
        links.push_back({{"gpus", {from, to}},
                         {"peer_access", link.access},
                         {"nvlink", link.nvlink},
                         {"performance_rank", link.performance_rank}});
      }
    }
    multipath["nvlink_from"] = topology_->source();
    multipath["links"] = links;
    // One entry per GPU and direction it carries for its peers.
    nlohmann::json relays = nlohmann::json::array();
    for (const auto* paths : {&retrieve_relays_, &store_relays_}) {
      for (const std::unique_ptr<CudaRelayPath>& h : *paths) {
        if (h == nullptr) continue;
        nlohmann::json one = {
            {"device", h->device()},
            {"direction", h->direction() == Direction::kStore ? "store" : "retrieve"},
            {"staging_bytes", h->staging_bytes()},
            {"copies_relayed", h->copies_relayed()},
            {"bytes_carried", h->bytes_carried()},
            {"failed", h->failed()}};
        if (h->failed()) one["failure"] = h->failure();
        relays.push_back(one);
        gpu_bytes += h->staging_bytes();
      }
    }
    multipath["relays"] = relays;
    nlohmann::json retrieves = nlohmann::json::array();
    nlohmann::json stores = nlohmann::json::array();
    for (const Device& d : devices_) {
      retrieves.push_back(d.retrieve->multipath_copies());
      stores.push_back(d.store->multipath_copies());
    }
    multipath["multipath_retrieves"] = retrieves;  // per target GPU
    multipath["multipath_stores"] = stores;        // per target GPU
    out["gpu_memory_bytes"] = gpu_bytes;
  }
  out["multipath"] = multipath;
}

}  // namespace kvstash::backends
