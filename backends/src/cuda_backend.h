// The CUDA backend: engines share GPU memory through CUDA IPC handles, L1
// slabs are pinned with cudaHostRegister, and chunks move by the gather and
// scatter kernels (kernels/) in dma or direct mode (cuda_copy_lane.h). One
// pair of copy lanes per visible GPU.
//
// Open, CheckRegistration and Describe may run on any thread; Copy runs on
// the lane threads, each (device, direction) on its own.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda_copy_lane.h"
#include "cuda_relay_path.h"
#include "kvstash/backends/backend.h"
#include "kvstash/backends/link_loads.h"
#include "kvstash/config/server_config.h"
#include "kvstash/cuda/devices.h"
#include "kvstash/cuda/peers.h"

namespace kvstash::backends {

class CudaBackend : public Backend {
 public:
  // Unavailable, with the runtime's reason, where no GPU is usable.
  static Result<std::unique_ptr<Backend>> Create(const config::ServerConfig& config);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  int num_devices() const override { return int(devices_.size()); }
  Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec& spec) override;
  SlabHooks slab_hooks() override;
  Status CheckRegistration(int device, const std::vector<GroupAddresses>& groups,
                           uint64_t chunk_bytes) const override;
  Status Copy(Direction direction, int device, const CopyLayout& layout,
              const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint32_t>& slabs,
              CopyDeadlines& deadlines, const CopySignal* signal = nullptr) override;
  Result<BoardMapping> MapBoard(int device, uint8_t* base, uint64_t bytes) override;
  void Describe(nlohmann::json& out) const override;
  LinkLoads* link_loads() override { return loads_.get(); }

 private:
  struct Device {
    int ordinal = 0;
    cuda::GpuUuid uuid{};
    std::string name;
    std::unique_ptr<CudaCopyLane> store;
    std::unique_ptr<CudaCopyLane> retrieve;
  };
  CudaBackend(TransferMode mode, CompletionWait wait) : mode_(mode), wait_(wait) {}
  // Multi-path copies: the topology, peer access, each GPU's relays (one
  // per direction) and each lane's relays; otherwise why there is one path.
  Status SetUpMultipath(const config::ServerConfig& config);
  // Whether `relay` carries retrieves and stores for `target`.
  bool CarriesFor(int relay, int target) const {
    return !carries_for_.empty() && carries_for_[size_t(relay) * devices_.size() + size_t(target)];
  }

  const TransferMode mode_;
  const CompletionWait wait_;
  // Multi-path copies; all fixed after Create. Null / empty: one path, for
  // the reason in multipath_state_.
  std::unique_ptr<LinkLoads> loads_;
  std::optional<cuda::PeerTopology> topology_;
  // index = CUDA ordinal; may be null; a GPU has both or neither.
  std::vector<std::unique_ptr<CudaRelayPath>> retrieve_relays_;
  std::vector<std::unique_ptr<CudaRelayPath>> store_relays_;
  std::vector<bool> carries_for_;  // [relay * devices + target]: NVLink, peer access on, a relay
  std::string multipath_state_ = "off (--multipath off)";
  std::vector<Device> devices_;  // index = CUDA ordinal; fixed after Create
  std::shared_ptr<std::atomic<int64_t>> ipc_open_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace kvstash::backends
