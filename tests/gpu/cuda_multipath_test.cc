// Multi-path retrieves through an NVLink peer, at the copy lane: GPU 0's
// retrieve lane with GPU 1 as its relay, against the kernels' CPU twins,
// byte for byte, in both transfer modes, on every kernel test layout:
// chunks split between the two paths (one of them sent over NVLink in
// pieces, as large chunks are); a layer-wise retrieve whose slots,
// seen from an engine stream that waits on each, never come before that
// range's bytes; a relay that fails mid-copy (the rest goes over GPU 0's
// own link); a relay whose own retrieve queue is busy, or that another
// retrieve holds (one path). Skips, saying why, without two GPUs joined by
// NVLink with peer access.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "completion_board.h"
#include "cuda_copy_lane.h"
#include "cuda_relay_path.h"
#include "gpu.h"
#include "kvstash/completion_board.h"
#include "kvstash/cuda/driver_api.h"
#include "kvstash/cuda/peers.h"
#include "layouts.h"
#include "link_loads.h"

namespace kvstash::server {
namespace {

using kernels::test::AllLayouts;
using kernels::test::ChunkSpec;
using kernels::test::TestLayout;

constexpr uint32_t kLayers = 9;  // layer-wise steps of 1, 1, 2, 4, 1 layers
constexpr int kTarget = 0;
constexpr int kRelay = 1;

enum class Scenario {
  kSplitChunks,
  kChunkInPieces,
  kLayerWise,
  kRelayFailsMidCopy,
  kRelayBusy,
  kRelayHeld
};

struct Case {
  TestLayout layout;
  TransferMode mode;
  Scenario scenario;
};

std::string NameOf(const ::testing::TestParamInfo<Case>& info) {
  const char* scenario[] = {"SplitChunks",       "ChunkInPieces", "LayerWise",
                            "RelayFailsMidCopy", "RelayBusy",     "RelayHeld"};
  return info.param.layout.name + "_" + scenario[int(info.param.scenario)] + "_" +
         (info.param.mode == TransferMode::kDma ? "dma" : "direct");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (TestLayout l : AllLayouts()) {
    l.num_layers = kLayers;
    for (TransferMode mode : {TransferMode::kDma, TransferMode::kDirect}) {
      for (Scenario s :
           {Scenario::kSplitChunks, Scenario::kChunkInPieces, Scenario::kLayerWise,
            Scenario::kRelayFailsMidCopy, Scenario::kRelayBusy, Scenario::kRelayHeld}) {
        cases.push_back({l, mode, s});
      }
    }
  }
  return cases;
}

// Empty when GPUs 0 and 1 can run multi-path retrieves; otherwise why not.
std::string NoPairReason() {
  const std::string no_gpu = testing::NoGpuReason();
  if (!no_gpu.empty()) return "needs a GPU: " + no_gpu;
  Result<int> count = cuda::DeviceCount();
  if (!count.ok() || *count < 2)
    return "needs 2 GPUs, " + std::to_string(count.ok() ? *count : 0) + " visible";
  Result<cuda::PeerTopology> topology = cuda::PeerTopology::Detect(2);
  if (!topology.ok()) return topology.status().ToString();
  if (!topology->CanRelay(kRelay, kTarget))
    return "GPUs 0 and 1 have no NVLink with peer access (" + topology->source() + ")";
  return "";
}

// GPU 0's engine memory as the relay reaches it: the same address (peer
// access on, one address space), standing in for an IPC handle opened there.
class PeerVisibleAllocation : public MappedAllocation {
 public:
  PeerVisibleAllocation(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return kTarget; }
  uint8_t* base_on(int device) const override {
    return device == kTarget || device == kRelay ? base_ : nullptr;
  }

 private:
  uint8_t* const base_;
  const uint64_t size_;
};

class CudaMultipathTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string why = NoPairReason();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(cuda::EnablePeerAccess(kRelay, kTarget).ok());
    ASSERT_TRUE(cuda::EnablePeerAccess(kTarget, kRelay).ok());
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const TestLayout& l = GetParam().layout;
    chunk_bytes_ = (l.flat_bytes() + 255) / 256 * 256;
    // The full chunk last: with two paths it is the relay's (dma: chunks
    // [0, 2) own, [2, 3) relay; direct: chunk 1 relay), and it writes
    // the most bytes.
    specs_ = kernels::test::MixedBatch(l, 7);
    std::swap(specs_[0], specs_[2]);
    host_kv_ = kernels::test::RandomBytes(l.arena_bytes(), 11);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_kv_), l.arena_bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device_kv_, host_kv_.data(), host_kv_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    allocations_.push_back(std::make_shared<PeerVisibleAllocation>(device_kv_, l.arena_bytes()));
    l1_bytes_ = 3 * chunk_bytes_;
    void* l1 = mmap(nullptr, l1_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(l1, MAP_FAILED);
    l1_ = static_cast<uint8_t*>(l1);
    const std::vector<uint8_t> flat = kernels::test::RandomBytes(l1_bytes_, 13);
    std::memcpy(l1_, flat.data(), l1_bytes_);
    // Portable: the relay's copy engines and kernels read it too.
    ASSERT_EQ(cudaHostRegister(l1_, l1_bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped),
              cudaSuccess);

    const bool dma = GetParam().mode == TransferMode::kDma;
    auto relay = CudaRelayPath::Create(kRelay, dma ? 16 << 20 : 0);
    ASSERT_TRUE(relay.ok()) << relay.status().ToString();
    relay_ = std::move(*relay);
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    CudaCopyLane::Options options;
    options.device = kTarget;
    options.direction = Direction::kRetrieve;
    options.mode = GetParam().mode;
    options.staging_bytes = 16 << 20;
    int same_address = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&same_address, cudaDevAttrCanUseHostPointerForRegisteredMem,
                                     kTarget),
              cudaSuccess);
    options.host_pointers_on_device = same_address != 0;
    auto lane = CudaCopyLane::Create(options);
    ASSERT_TRUE(lane.ok()) << lane.status().ToString();
    lane_ = std::move(*lane);
    CudaCopyLane::Relays relays;
    relays.paths = {relay_.get()};
    relays.loads = &loads_;
    relays.policy.min_path_bytes = 0;  // test chunks are small
    // The relay's one-chunk sub-batch over NVLink in pieces of 2 KiB, as a
    // 32 MiB chunk goes in pieces of 8 MiB.
    if (GetParam().scenario == Scenario::kChunkInPieces) relays.piece_bytes = 2048;
    if (GetParam().scenario == Scenario::kRelayFailsMidCopy) {
      // The relay's third sub-batch (or step) fails: the first two went
      // through it, the rest goes over GPU 0's own link.
      relays.fault = [this](int device, size_t) {
        EXPECT_EQ(device, kRelay);
        return ++relay_calls_ == 3 ? Status::DeviceError("injected relay failure") : Status::Ok();
      };
    }
    lane_->SetRelays(std::move(relays));
  }
  void TearDown() override {
    lane_.reset();
    relay_.reset();
    board_.reset();
    if (!board_name_.empty()) shm_unlink(board_name_.c_str());
    if (l1_ != nullptr) {
      cudaHostUnregister(l1_);
      munmap(l1_, l1_bytes_);
    }
    if (device_kv_ != nullptr) cudaFree(device_kv_);
  }

  std::vector<GroupAddresses> Groups(uint8_t* base) const {
    const TestLayout& l = GetParam().layout;
    GroupAddresses g;
    g.layer_bases = kernels::test::LayerBases(l, base);
    g.group = kernels::test::MakeGroup(l, g.layer_bases);
    std::vector<GroupAddresses> groups = {std::move(g)};
    groups[0].group.layer_bases = groups[0].layer_bases.data();
    return groups;
  }
  std::vector<kernels::ChunkCopy> Chunks(uint8_t* l1) const {
    return kernels::test::MakeChunkCopies(specs_, {l1, l1 + chunk_bytes_, l1 + 2 * chunk_bytes_});
  }

  // A board of one slot per layer, device-mapped on GPU 0 as the backend
  // maps an engine's.
  void OpenBoard() {
    board_name_ = "/kvstash-multipath-test-" + std::to_string(getpid());
    const int fd = shm_open(board_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kLayers * kBoardSlotBytes), 0);
    close(fd);
    auto map = [](uint8_t* base, uint64_t bytes) -> Result<BoardMapping> {
      if (cudaSetDevice(kTarget) != cudaSuccess ||
          cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) !=
              cudaSuccess) {
        return Status::DeviceError("cannot register the board");
      }
      void* mapped = nullptr;
      if (cudaHostGetDevicePointer(&mapped, base, 0) != cudaSuccess)
        return Status::DeviceError("cannot map the board");
      return BoardMapping{static_cast<uint8_t*>(mapped), [base] { cudaHostUnregister(base); }};
    };
    auto board = CompletionBoard::Open(board_name_, kLayers * kBoardSlotBytes,
                                       PeerCredentials{::getuid(), ::getgid(), ::getpid()}, map);
    ASSERT_TRUE(board.ok()) << board.status().ToString();
    board_ = *board;
  }

  void RetrieveAndCheck() {
    const Case& c = GetParam();
    const TestLayout& l = c.layout;
    std::vector<uint8_t> expected_kv = host_kv_;
    std::vector<uint8_t> expected_l1(l1_, l1_ + l1_bytes_);
    const std::vector<GroupAddresses> host_groups = Groups(expected_kv.data());
    const std::vector<kernels::ChunkCopy> host_chunks = Chunks(expected_l1.data());
    ASSERT_TRUE(kernels::ScatterChunksCpu(host_groups[0].group, host_chunks.data(), 3).ok());

    const bool layer_wise =
        c.scenario == Scenario::kLayerWise || c.scenario == Scenario::kRelayFailsMidCopy;
    CopySignal signal;
    constexpr uint32_t kSequence = 1;
    // An engine stream on GPU 0 that waits for each layer's slot, then
    // snapshots the engine memory: layer k of snapshot k must be complete.
    cudaStream_t engine = nullptr;
    std::vector<uint8_t*> snapshots;
    if (layer_wise) {
      OpenBoard();
      if (HasFatalFailure()) return;
      signal.board = board_;
      signal.sequence = kSequence;
      for (uint32_t k = 0; k < kLayers; ++k) {
        signal.ranges.push_back({{k, 1}});
        signal.range_slots.push_back(k);
      }
      Result<const cuda::DriverApi*> api = cuda::StreamMemOps();
      if (!api.ok()) GTEST_SKIP() << api.status().ToString();
      ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
      for (uint32_t k = 0; k < kLayers; ++k) {
        uint8_t* snapshot = nullptr;
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&snapshot), l.arena_bytes()), cudaSuccess);
        snapshots.push_back(snapshot);
        ASSERT_EQ((*api)->StreamWaitValue32(engine, board_->device_value(k), kSequence,
                                            CU_STREAM_WAIT_VALUE_GEQ),
                  CUDA_SUCCESS);
        ASSERT_EQ(cudaMemcpyAsync(snapshot, device_kv_, l.arena_bytes(), cudaMemcpyDeviceToDevice,
                                  engine),
                  cudaSuccess);
      }
    }
    if (c.scenario == Scenario::kRelayBusy) loads_.Add(kRelay, Direction::kRetrieve, 1);
    if (c.scenario == Scenario::kRelayHeld) {
      ASSERT_TRUE(relay_->TryAcquire());
    }

    const std::vector<GroupAddresses> groups = Groups(device_kv_);
    CopyLayout layout{1, chunk_bytes_, groups};
    layout.allocations = &allocations_;
    CopyDeadlines deadlines;
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const Status copied =
        lane_->Copy(layout, Chunks(l1_), {0, 0, 1}, deadlines, layer_wise ? &signal : nullptr);
    ASSERT_TRUE(copied.ok()) << copied.ToString();

    std::vector<uint8_t> kv(host_kv_.size());
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(kv, expected_kv);

    if (layer_wise) {
      for (uint32_t k = 0; k < kLayers; ++k) {
        EXPECT_EQ(board_->Value(k).value_or(0), kSequence) << "slot " << k << " not released";
        board_->WriteValue(k, kSequence);  // never leave the engine stream waiting
      }
      ASSERT_EQ(cudaStreamSynchronize(engine), cudaSuccess);
      const uint64_t layer_bytes = LayerExtentBytes(l.geometry);
      for (uint32_t k = 0; k < kLayers; ++k) {
        std::vector<uint8_t> seen(layer_bytes);
        ASSERT_EQ(cudaMemcpy(seen.data(), snapshots[k] + l.layer_offset(k), layer_bytes,
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(std::memcmp(seen.data(), expected_kv.data() + l.layer_offset(k), layer_bytes), 0)
            << "layer " << k << "'s slot was released before all of its bytes arrived";
        cudaFree(snapshots[k]);
      }
      cudaStreamDestroy(engine);
    }

    switch (c.scenario) {
      case Scenario::kSplitChunks:
      case Scenario::kChunkInPieces:
      case Scenario::kLayerWise:
        EXPECT_GT(relay_->bytes_carried(), 0u) << "the relay carried nothing";
        EXPECT_EQ(lane_->multipath_retrieves(), 1u);
        EXPECT_FALSE(relay_->failed());
        break;
      case Scenario::kRelayFailsMidCopy:
        EXPECT_TRUE(relay_->failed());
        EXPECT_EQ(relay_calls_.load(), 3);
        break;
      case Scenario::kRelayBusy:
      case Scenario::kRelayHeld:
        EXPECT_EQ(relay_->bytes_carried(), 0u) << "a busy or held relay was used";
        EXPECT_EQ(lane_->multipath_retrieves(), 0u);
        break;
    }
  }

  uint64_t chunk_bytes_ = 0;
  std::vector<ChunkSpec> specs_;
  std::vector<uint8_t> host_kv_;
  uint8_t* device_kv_ = nullptr;
  std::vector<std::shared_ptr<MappedAllocation>> allocations_;
  uint8_t* l1_ = nullptr;
  uint64_t l1_bytes_ = 0;
  LinkLoads loads_{2};
  std::unique_ptr<CudaRelayPath> relay_;
  std::unique_ptr<CudaCopyLane> lane_;
  std::atomic<int> relay_calls_{0};
  std::string board_name_;
  std::shared_ptr<CompletionBoard> board_;
};

TEST_P(CudaMultipathTest, EveryByteMatchesTheCpuTwin) { RetrieveAndCheck(); }

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMultipathTest, ::testing::ValuesIn(Cases()), NameOf);

}  // namespace
}  // namespace kvstash::server
