// Multi-path retrieves and stores through an NVLink peer, at the copy lane:
// GPU 0's retrieve (store) lane with GPU 1 as its relay, against the
// kernels' CPU twins, byte for byte, in both transfer modes, on every kernel
// test layout. The copy is cut into pieces (multipath_split.h): runs of whole chunks;
// one chunk cut by layers (its relay pieces over NVLink in hops); a
// layer-wise retrieve, its steps cut by chunks and by layers, whose slots,
// seen from an engine stream that waits on each, never come before every
// byte of that range, whichever path carried it; more chunks than the
// staging holds (regions reused on both GPUs). The relay carries exactly
// the bytes the split gives it. A relay that fails mid-copy (the rest goes
// over GPU 0's own link); one whose own queue of that direction fills
// mid-request (it takes no further piece); one busy or held from the start
// (one path); one busy the other way only (used: PCIe is full duplex). A
// store with a done slot: an engine stream that waits for it and then
// overwrites its blocks never changes what reached L1, whichever path read
// them. A dma copy stopped mid-way (deadlines.stopping set while the relay
// takes a chosen piece): the batches enqueued before the stop exact, the
// chunks after it missed and untouched, the relay not failed, the next copy
// whole.
// Skips, saying why, without two GPUs joined by NVLink with peer access.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "cuda_copy_lane.h"
#include "cuda_relay_path.h"
#include "gpu.h"
#include "kvstash/backends/link_loads.h"
#include "kvstash/backends/mapped_board.h"
#include "kvstash/completion_board.h"
#include "kvstash/cuda/driver_api.h"
#include "kvstash/cuda/peers.h"
#include "layouts.h"
#include "multipath_split.h"

namespace kvstash::backends {
namespace {

using kernels::test::AllLayouts;
using kernels::test::ChunkSpec;
using kernels::test::TestLayout;

constexpr uint32_t kLayers = 9;  // layer-wise steps of 1, 1, 2, 4, 1 layers
constexpr int kTarget = 0;
constexpr int kRelay = 1;

enum class Scenario {
  kSplitChunks,
  kOneChunkByLayers,
  kLayerWise,
  kLayerWiseByLayers,
  kManyChunks,
  kManyChunksByLayers,
  kRelayFailsMidCopy,
  kRelayTurnsBusy,
  kRelayBusy,
  kRelayHeld,
  kRelayBusyTheOtherWay,
  kDoneSlot  // stores only
};
constexpr const char* kScenarioNames[] = {
    "SplitChunks",       "OneChunkByLayers",     "LayerWise",
    "LayerWiseByLayers", "ManyChunks",           "ManyChunksByLayers",
    "RelayFailsMidCopy", "RelayTurnsBusy",       "RelayBusy",
    "RelayHeld",         "RelayBusyTheOtherWay", "DoneSlot"};

struct Case {
  TestLayout layout;
  TransferMode mode;
  Scenario scenario;
  Direction direction = Direction::kRetrieve;
};

std::string NameOf(const ::testing::TestParamInfo<Case>& info) {
  return info.param.layout.name + "_" + (info.param.direction == Direction::kStore ? "Store" : "") +
         kScenarioNames[int(info.param.scenario)] + "_" +
         (info.param.mode == TransferMode::kDma ? "dma" : "direct");
}

// What a scenario retrieves, and the lane and relay it runs on.
struct Plan {
  size_t chunks = 3;
  bool layer_wise = false;
  uint64_t lane_staging = 16 << 20;
  uint64_t relay_staging = 16 << 20;  // dma mode
  uint64_t piece_bytes = 8 << 20;     // the lane's default
  uint64_t hop_bytes = 2 << 20;
};

Plan PlanOf(Scenario scenario, Direction direction, uint64_t chunk_bytes) {
  Plan plan;
  if (direction == Direction::kStore && scenario == Scenario::kRelayFailsMidCopy) {
    // A store has one step: its pieces come from batches, a chunk each cut
    // in two by layers, as below.
    scenario = Scenario::kManyChunksByLayers;
  }
  switch (scenario) {
    case Scenario::kSplitChunks:  // test chunks are small: runs of whole chunks
    case Scenario::kRelayBusy:
    case Scenario::kRelayHeld:
    case Scenario::kRelayBusyTheOtherWay:
    case Scenario::kDoneSlot: break;
    case Scenario::kOneChunkByLayers:
      // A quarter of a chunk a piece: layer ranges, the relay's in hops.
      plan.chunks = 1;
      plan.piece_bytes = chunk_bytes / 4;
      plan.hop_bytes = std::max<uint64_t>(256, chunk_bytes / 16);
      break;
    case Scenario::kLayerWise:
    case Scenario::kRelayFailsMidCopy: plan.layer_wise = true; break;
    case Scenario::kLayerWiseByLayers:  // steps of 4 layers in pieces of 1
      plan.layer_wise = true;
      plan.piece_bytes = chunk_bytes / 8;
      plan.hop_bytes = std::max<uint64_t>(256, chunk_bytes / 32);
      break;
    case Scenario::kManyChunks:
      // Batches of 4 whole chunks, two pieces of 2 each, in 2 regions: the
      // third batch reuses the first one's.
      plan.chunks = 12;
      plan.lane_staging = 8 * chunk_bytes;
      plan.piece_bytes = 2 * chunk_bytes;
      break;
    case Scenario::kManyChunksByLayers:
    case Scenario::kRelayTurnsBusy:
      // A chunk a batch in 4 regions, cut in two by layers; the relay's
      // staging holds a few pieces, so its regions are reused too. Busy
      // relay: layer-wise, so that direct mode (a piece per path and step)
      // has pieces left to give it after its first.
      plan.chunks = 8;
      plan.lane_staging = 4 * chunk_bytes;
      plan.relay_staging = 3 * ((chunk_bytes + 4095) / 4096 * 4096);
      plan.piece_bytes = chunk_bytes / 2;
      plan.layer_wise = scenario == Scenario::kRelayTurnsBusy && direction == Direction::kRetrieve;
      break;
  }
  return plan;
}

// Whether a scenario means something for that direction and mode: stores
// have no layer-wise steps, a done slot is a store's, and a direct store
// (one step: a piece per path) has no second relay piece to refuse.
bool Applies(Scenario s, Direction direction, TransferMode mode) {
  if (direction == Direction::kRetrieve) return s != Scenario::kDoneSlot;
  if (s == Scenario::kLayerWise || s == Scenario::kLayerWiseByLayers) return false;
  return !(s == Scenario::kRelayTurnsBusy && mode == TransferMode::kDirect);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (TestLayout l : AllLayouts()) {
    l.num_layers = kLayers;
    for (Direction direction : {Direction::kRetrieve, Direction::kStore}) {
      for (TransferMode mode : {TransferMode::kDma, TransferMode::kDirect}) {
        for (int s = 0; s <= int(Scenario::kDoneSlot); ++s) {
          if (Applies(Scenario(s), direction, mode))
            cases.push_back({l, mode, Scenario(s), direction});
        }
      }
    }
  }
  return cases;
}

// `l` with `num_blocks` blocks per layer: in a K-then-V layout the V half
// starts after every K block, so its kv stride grows with them.
TestLayout WithBlocks(TestLayout l, uint32_t num_blocks) {
  LayerGeometry& g = l.geometry;
  if (g.kv_stride == uint64_t{g.num_blocks} * g.block_stride)
    g.kv_stride = uint64_t{num_blocks} * g.block_stride;
  g.num_blocks = num_blocks;
  return l;
}

// Chunks on disjoint blocks, in turn a full one, a partial one whose skip
// reaches into its second block, and one whose skip passes its end (as
// kernels::test::MixedBatch, for any number of chunks). A store skips
// nothing.
std::vector<ChunkSpec> Specs(const TestLayout& l, size_t n, bool store, uint32_t seed) {
  const uint32_t bt = l.geometry.block_tokens;
  const uint32_t per_chunk = l.blocks_per_chunk();
  const std::vector<uint32_t> blocks =
      kernels::test::RandomBlocks(l.geometry.num_blocks, uint32_t(n) * per_chunk, seed);
  const uint32_t partial = l.chunk_tokens - bt - 3;
  const uint32_t half = l.chunk_tokens / 2 + 1;
  std::vector<ChunkSpec> specs;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t tokens = i % 3 == 0 ? l.chunk_tokens : i % 3 == 1 ? partial : half;
    const uint32_t skip = i % 3 == 0   ? 0
                          : i % 3 == 1 ? std::min(bt + 1, partial / 2)
                                       : l.chunk_tokens;
    auto first = blocks.begin() + long(i * per_chunk);
    specs.push_back(
        {std::vector<uint32_t>(first, first + (tokens + bt - 1) / bt), tokens, store ? 0 : skip});
  }
  return specs;
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

// A dma copy with two paths as the lane cuts it (multipath_split.h): its
// pieces, chunks per batch and regions of GPU 0's staging.
struct DmaCut {
  std::vector<CopyPiece> pieces;
  size_t per_batch = 1;
  size_t regions = 1;
};

DmaCut CutDma(const Plan& plan, const std::vector<GroupAddresses>& groups,
              const std::vector<CopyStep>& steps, uint64_t chunk_bytes) {
  DmaCut cut;
  const uint64_t piece = std::min(plan.piece_bytes, plan.relay_staging / 2);
  const size_t slots = size_t(plan.lane_staging / chunk_bytes);
  cut.per_batch =
      ChunksPerBatch(chunk_bytes, 2, piece, std::min(plan.chunks, std::max<size_t>(1, slots / 2)));
  cut.pieces = SplitCopy(groups, steps, chunk_bytes, plan.chunks, cut.per_batch, 2, piece);
  // At most 16 regions, as the lane's ring has (where batches land only).
  cut.regions = std::min<size_t>(16, std::max<size_t>(1, slots / cut.per_batch));
  return cut;
}

// The bytes of each piece the relay is given, in order, as the lane cuts
// the copy (multipath_split.h) with two paths, none failing.
std::vector<uint64_t> RelayPieces(const Case& c, const Plan& plan,
                                  const std::vector<GroupAddresses>& groups,
                                  const CopySignal* signal, uint64_t chunk_bytes) {
  const std::vector<CopyStep> steps = CopySteps(groups, signal);
  const std::vector<CopyPiece> pieces =
      c.mode == TransferMode::kDirect
          ? SplitCopy(groups, steps, chunk_bytes, plan.chunks, plan.chunks, 2,
                      std::numeric_limits<uint64_t>::max())
          : CutDma(plan, groups, steps, chunk_bytes).pieces;
  const std::vector<size_t> path = AssignPieces(pieces, 2);
  std::vector<uint64_t> relay;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (path[i] == 1) relay.push_back(pieces[i].bytes);
  }
  return relay;
}

std::string Describe(const std::vector<uint64_t>& pieces) {
  std::string out;
  for (uint64_t b : pieces) out += (out.empty() ? "" : " ") + std::to_string(b);
  return "[" + out + "]";
}

class CudaMultipathTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string why = NoPairReason();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(cuda::EnablePeerAccess(kRelay, kTarget).ok());
    ASSERT_TRUE(cuda::EnablePeerAccess(kTarget, kRelay).ok());
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const Case& c = GetParam();
    chunk_bytes_ = (c.layout.flat_bytes() + 255) / 256 * 256;
    store_ = c.direction == Direction::kStore;
    plan_ = PlanOf(c.scenario, c.direction, chunk_bytes_);
    // Blocks for every chunk of the plan (and two more nobody names).
    layout_ = WithBlocks(c.layout, uint32_t(plan_.chunks) * c.layout.blocks_per_chunk() + 2);
    const TestLayout& l = layout_;
    specs_ = Specs(l, plan_.chunks, store_, 7);
    host_kv_ = kernels::test::RandomBytes(l.arena_bytes(), 11);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_kv_), l.arena_bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device_kv_, host_kv_.data(), host_kv_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    allocations_.push_back(std::make_shared<PeerVisibleAllocation>(device_kv_, l.arena_bytes()));
    // L1 slots: chunk i at slot order_[i]; past the first three, pairs
    // swapped, so that some runs of chunks are adjacent in L1 and some are
    // not; slots 3 to a slab (adjacent slots of two slabs copy apart).
    order_.resize(plan_.chunks);
    std::iota(order_.begin(), order_.end(), size_t{0});
    for (size_t i = 3; i + 1 < plan_.chunks; i += 2) std::swap(order_[i], order_[i + 1]);
    for (size_t i = 0; i < plan_.chunks; ++i) slabs_.push_back(uint32_t(order_[i] / 3));
    l1_bytes_ = plan_.chunks * chunk_bytes_;
    void* l1 = mmap(nullptr, l1_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(l1, MAP_FAILED);
    l1_ = static_cast<uint8_t*>(l1);
    const std::vector<uint8_t> flat = kernels::test::RandomBytes(l1_bytes_, 13);
    std::memcpy(l1_, flat.data(), l1_bytes_);
    // Portable: the relay's copy engines and kernels read it too.
    ASSERT_EQ(cudaHostRegister(l1_, l1_bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped),
              cudaSuccess);

    const bool dma = c.mode == TransferMode::kDma;
    auto relay = CudaRelayPath::Create(kRelay, c.direction, dma ? plan_.relay_staging : 0);
    ASSERT_TRUE(relay.ok()) << relay.status().ToString();
    relay_ = std::move(*relay);
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    CudaCopyLane::Options options;
    options.device = kTarget;
    options.direction = c.direction;
    options.mode = c.mode;
    options.staging_bytes = plan_.lane_staging;
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
    relays.piece_bytes = plan_.piece_bytes;
    relays.hop_bytes = plan_.hop_bytes;
    if (c.scenario == Scenario::kRelayFailsMidCopy) {
      // The relay's third piece fails: the first two went through it, the
      // rest goes over GPU 0's own link. A direct store gives the relay one
      // piece (after GPU 0's own): that one fails.
      fail_at_ = store_ && c.mode == TransferMode::kDirect ? 1 : 3;
      relays.fault = [this](int device, size_t) {
        EXPECT_EQ(device, kRelay);
        return ++relay_calls_ == fail_at_ ? Status::DeviceError("injected relay failure")
                                          : Status::Ok();
      };
    } else if (c.scenario == Scenario::kRelayTurnsBusy) {
      // GPU 1's engine starts loading while the relay carries its first
      // piece: its own queue is no longer idle.
      relays.fault = [this](int device, size_t) {
        EXPECT_EQ(device, kRelay);
        if (++relay_calls_ == 1) loads_.Add(kRelay, GetParam().direction, 1);
        return Status::Ok();
      };
    } else {
      relays.fault = [this](int, size_t piece) {
        ++relay_calls_;
        if (on_relay_piece_) on_relay_piece_(piece);
        return Status::Ok();
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
    GroupAddresses g;
    g.layer_bases = kernels::test::LayerBases(layout_, base);
    g.group = kernels::test::MakeGroup(layout_, g.layer_bases);
    std::vector<GroupAddresses> groups = {std::move(g)};
    groups[0].group.layer_bases = groups[0].layer_bases.data();
    return groups;
  }
  std::vector<kernels::ChunkCopy> Chunks(uint8_t* l1) const {
    std::vector<uint8_t*> flats;
    for (size_t i = 0; i < plan_.chunks; ++i) flats.push_back(l1 + order_[i] * chunk_bytes_);
    return kernels::test::MakeChunkCopies(specs_, flats);
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
    auto board = MappedBoard::Open(board_name_, kLayers * kBoardSlotBytes,
                                   PeerCredentials{::getuid(), ::getgid(), ::getpid()}, map);
    ASSERT_TRUE(board.ok()) << board.status().ToString();
    board_ = *board;
  }

  // `signal` releases slot k of the board once layer k is in place.
  void SignalEachLayer(CopySignal& signal, uint32_t sequence) {
    signal.board = board_;
    signal.sequence = sequence;
    for (uint32_t k = 0; k < kLayers; ++k) {
      signal.ranges.push_back({{k, 1}});
      signal.range_slots.push_back(k);
    }
  }

  void CopyAndCheck() {
    const Case& c = GetParam();
    const TestLayout& l = layout_;
    std::vector<uint8_t> expected_kv = host_kv_;
    std::vector<uint8_t> expected_l1(l1_, l1_ + l1_bytes_);
    const std::vector<GroupAddresses> host_groups = Groups(expected_kv.data());
    const std::vector<kernels::ChunkCopy> host_chunks = Chunks(expected_l1.data());
    ASSERT_TRUE((store_ ? kernels::GatherChunksCpu(host_groups[0].group, host_chunks.data(),
                                                   host_chunks.size())
                        : kernels::ScatterChunksCpu(host_groups[0].group, host_chunks.data(),
                                                    host_chunks.size()))
                    .ok());

    CopySignal signal;
    constexpr uint32_t kSequence = 1;
    constexpr uint32_t kDoneSlot = 1;
    // A store's done slot: an engine stream on GPU 0 waits for it, then
    // reuses (overwrites) its blocks, as an engine does after WaitReusable.
    cudaStream_t engine = nullptr;
    const bool done_slot = c.scenario == Scenario::kDoneSlot;
    if (done_slot) {
      OpenBoard();
      if (HasFatalFailure()) return;
      signal.board = board_;
      signal.sequence = kSequence;
      signal.done_slot = kDoneSlot;
      Result<const cuda::DriverApi*> api = cuda::StreamMemOps();
      if (!api.ok()) GTEST_SKIP() << api.status().ToString();
      ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ((*api)->StreamWaitValue32(engine, board_->device_value(kDoneSlot), kSequence,
                                          CU_STREAM_WAIT_VALUE_GEQ),
                CUDA_SUCCESS);
      ASSERT_EQ(cudaMemsetAsync(device_kv_, 0x5a, l.arena_bytes(), engine), cudaSuccess);
    }
    // An engine stream on GPU 0 that waits for each layer's slot, then
    // snapshots the engine memory: layer k of snapshot k must be complete.
    std::vector<uint8_t*> snapshots;
    if (plan_.layer_wise) {
      OpenBoard();
      if (HasFatalFailure()) return;
      SignalEachLayer(signal, kSequence);
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
    const Direction other =
        c.direction == Direction::kStore ? Direction::kRetrieve : Direction::kStore;
    if (c.scenario == Scenario::kRelayBusy) loads_.Add(kRelay, c.direction, 1);
    if (c.scenario == Scenario::kRelayBusyTheOtherWay) loads_.Add(kRelay, other, 1 << 30);
    if (c.scenario == Scenario::kRelayHeld) {
      ASSERT_TRUE(relay_->TryAcquire());
    }

    const std::vector<GroupAddresses> groups = Groups(device_kv_);
    CopyLayout layout{1, chunk_bytes_, groups};
    layout.allocations = &allocations_;
    // What the split gives the relay, none failing.
    const std::vector<uint64_t> relay_pieces =
        RelayPieces(c, plan_, groups, plan_.layer_wise ? &signal : nullptr, chunk_bytes_);
    CopyDeadlines deadlines;
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const bool signalled = plan_.layer_wise || done_slot;
    const Status copied =
        lane_->Copy(layout, Chunks(l1_), slabs_, deadlines, signalled ? &signal : nullptr);
    if (done_slot) {
      EXPECT_EQ(board_->Value(kDoneSlot).value_or(0), kSequence) << "the done slot not released";
      board_->WriteValue(kDoneSlot, kSequence);  // never leave the engine stream waiting
      ASSERT_EQ(cudaStreamSynchronize(engine), cudaSuccess);
      cudaStreamDestroy(engine);
    }
    ASSERT_TRUE(copied.ok()) << copied.ToString();

    std::vector<uint8_t> kv(host_kv_.size());
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (store_) {
      // Every slot's group bytes exact (bytes outside the group are the
      // lane's to leave alone or not). Read after the engine overwrote its
      // blocks past the done slot: a path still reading them then would
      // have carried the overwritten bytes.
      const uint64_t group_bytes = FlatGroupBytes(l.shape());
      for (size_t j = 0; j < plan_.chunks; ++j) {
        const uint8_t* got = l1_ + j * chunk_bytes_ + kernels::test::kFlatOffsetBytes;
        const uint8_t* want =
            expected_l1.data() + j * chunk_bytes_ + kernels::test::kFlatOffsetBytes;
        EXPECT_EQ(std::memcmp(got, want, group_bytes), 0)
            << "L1 slot " << j << " differs from the CPU twin's gather; relay pieces "
            << Describe(relay_pieces) << ", relay carried " << relay_->bytes_carried();
      }
      if (!done_slot) {
        EXPECT_EQ(kv, host_kv_) << "a store wrote the engine's memory";
      }
    } else {
      size_t wrong = 0, first_wrong = kv.size();
      for (size_t i = 0; i < kv.size(); ++i) {
        if (kv[i] == expected_kv[i]) continue;
        if (wrong++ == 0) first_wrong = i;
      }
      EXPECT_EQ(wrong, 0u) << "bytes of the engine's memory differ from the CPU twin's, the first "
                           << "at " << first_wrong << " (layer "
                           << (first_wrong / std::max<uint64_t>(1, l.layer_offset(1))) << ") of "
                           << kv.size() << "; relay pieces " << Describe(relay_pieces)
                           << ", relay carried " << relay_->bytes_carried();
    }

    if (plan_.layer_wise) {
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

    const uint64_t all = std::accumulate(relay_pieces.begin(), relay_pieces.end(), uint64_t{0});
    switch (c.scenario) {
      case Scenario::kSplitChunks:
      case Scenario::kOneChunkByLayers:
      case Scenario::kLayerWise:
      case Scenario::kLayerWiseByLayers:
      case Scenario::kManyChunks:
      case Scenario::kManyChunksByLayers:
      case Scenario::kRelayBusyTheOtherWay:
      case Scenario::kDoneSlot:
        ASSERT_FALSE(relay_pieces.empty()) << "the split gives the relay nothing to carry";
        EXPECT_EQ(relay_->bytes_carried(), all)
            << "the relay's pieces " << Describe(relay_pieces) << " and what it carried differ";
        EXPECT_EQ(size_t(relay_calls_.load()), relay_pieces.size());
        EXPECT_EQ(lane_->multipath_copies(), 1u);
        EXPECT_FALSE(relay_->failed()) << relay_->failure();
        break;
      case Scenario::kRelayFailsMidCopy:
        ASSERT_GE(relay_pieces.size(), size_t(fail_at_)) << Describe(relay_pieces);
        EXPECT_TRUE(relay_->failed());
        EXPECT_EQ(relay_calls_.load(), fail_at_);
        EXPECT_EQ(relay_->bytes_carried(),
                  std::accumulate(relay_pieces.begin(), relay_pieces.begin() + (fail_at_ - 1),
                                  uint64_t{0}))
            << "the pieces before the failure, of " << Describe(relay_pieces);
        break;
      case Scenario::kRelayTurnsBusy:
        ASSERT_GE(relay_pieces.size(), 2u) << Describe(relay_pieces);
        EXPECT_EQ(relay_calls_.load(), 1) << "a relay whose own queue filled took more pieces";
        EXPECT_EQ(relay_->bytes_carried(), relay_pieces[0]) << Describe(relay_pieces);
        EXPECT_FALSE(relay_->failed()) << relay_->failure();
        break;
      case Scenario::kRelayBusy:
      case Scenario::kRelayHeld:
        EXPECT_EQ(relay_->bytes_carried(), 0u) << "a busy or held relay was used";
        EXPECT_EQ(relay_calls_.load(), 0);
        EXPECT_EQ(lane_->multipath_copies(), 0u);
        break;
    }
  }

  bool store_ = false;
  int fail_at_ = 0;  // the relay's call that fails (kRelayFailsMidCopy)
  uint64_t chunk_bytes_ = 0;
  Plan plan_;
  TestLayout layout_;
  std::vector<ChunkSpec> specs_;
  std::vector<size_t> order_;
  std::vector<uint32_t> slabs_;
  std::vector<uint8_t> host_kv_;
  uint8_t* device_kv_ = nullptr;
  std::vector<std::shared_ptr<MappedAllocation>> allocations_;
  uint8_t* l1_ = nullptr;
  uint64_t l1_bytes_ = 0;
  LinkLoads loads_{2};
  std::unique_ptr<CudaRelayPath> relay_;
  std::unique_ptr<CudaCopyLane> lane_;
  std::atomic<int> relay_calls_{0};
  // Called with the index of each piece the relay is given (none failing).
  std::function<void(size_t)> on_relay_piece_;
  std::string board_name_;
  std::shared_ptr<MappedBoard> board_;
};

TEST_P(CudaMultipathTest, EveryByteMatchesTheCpuTwin) { CopyAndCheck(); }

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMultipathTest, ::testing::ValuesIn(Cases()), NameOf);

// A multi-path dma copy that stops mid-way: the relay's hook sets
// deadlines.stopping while the lane enqueues a chosen relay piece, so the
// next batch's check stops the copy, at a place the split says. Copy
// succeeds; the chunks of every batch enqueued before are exact and not
// missed, the rest missed and untouched (a stop in a later layer-wise step
// misses every chunk: each misses that step); the relay is not failed and
// carried exactly its pieces before the stop; the lane then copies a whole
// request exactly.
class CudaMultipathDeadlineTest : public CudaMultipathTest {
 protected:
  static constexpr uint32_t kSequence = 1;

  void StopAndCheck() {
    const TestLayout& l = layout_;
    const std::vector<GroupAddresses> groups = Groups(device_kv_);
    CopyLayout layout{1, chunk_bytes_, groups};
    layout.allocations = &allocations_;
    CopySignal signal;
    if (plan_.layer_wise) {
      OpenBoard();
      if (HasFatalFailure()) return;
      SignalEachLayer(signal, kSequence);
      // The lane writes the slots with stream memory operations.
      Result<const cuda::DriverApi*> api = cuda::StreamMemOps();
      if (!api.ok()) GTEST_SKIP() << api.status().ToString();
    }
    CopySignal* const signalled = plan_.layer_wise ? &signal : nullptr;
    const std::vector<CopyStep> steps = CopySteps(groups, signalled);
    const DmaCut cut = CutDma(plan_, groups, steps, chunk_bytes_);
    std::vector<PieceBatch> batches;  // in the order they are enqueued
    for (const auto& step :
         PieceBatches(cut.pieces, steps.size(), plan_.chunks, cut.per_batch, cut.regions))
      batches.insert(batches.end(), step.begin(), step.end());
    const std::vector<size_t> path = AssignPieces(cut.pieces, 2);
    // The stop: at the relay's first piece of the second step (layer-wise)
    // or of the third batch.
    size_t stop_piece = cut.pieces.size();
    for (size_t i = 0; i < cut.pieces.size() && stop_piece == cut.pieces.size(); ++i) {
      const CopyPiece& p = cut.pieces[i];
      if (path[i] == 1 && (plan_.layer_wise ? p.step >= 1 : p.batch >= 2)) stop_piece = i;
    }
    ASSERT_LT(stop_piece, cut.pieces.size()) << "the relay has no piece where the copy should stop";
    size_t at = 0;  // the batch of the stop piece: enqueued whole
    while (at < batches.size() && batches[at].first + batches[at].count <= stop_piece) ++at;
    ASSERT_LT(at + 1, batches.size()) << "no batch left to leave out after the stop";
    const PieceBatch& left_out = batches[at + 1];  // the first batch not enqueued
    const size_t stopped_at = left_out.step == 0 ? left_out.begin : 0;
    uint64_t relay_bytes = 0;
    int relay_pieces = 0;
    for (size_t i = 0; i < left_out.first; ++i) {
      if (path[i] != 1) continue;
      relay_bytes += cut.pieces[i].bytes;
      ++relay_pieces;
    }

    std::atomic<bool> stopping{false};
    on_relay_piece_ = [&](size_t piece) {
      if (piece == stop_piece) stopping.store(true);
    };
    const std::vector<uint8_t> kv_before = host_kv_;
    const std::vector<uint8_t> l1_before(l1_, l1_ + l1_bytes_);
    CopyDeadlines deadlines;
    deadlines.stopping = &stopping;
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const Status copied = lane_->Copy(layout, Chunks(l1_), slabs_, deadlines, signalled);
    ASSERT_TRUE(copied.ok()) << copied.ToString();
    EXPECT_TRUE(stopping.load()) << "the relay was never given piece " << stop_piece;
    std::vector<uint8_t> want_missed(plan_.chunks, 0);
    for (size_t j = stopped_at; j < plan_.chunks; ++j) want_missed[j] = 1;
    EXPECT_EQ(deadlines.missed, want_missed)
        << "stopped before batch " << left_out.batch << " of step " << left_out.step;
    EXPECT_FALSE(relay_->failed()) << relay_->failure();
    EXPECT_EQ(relay_calls_.load(), relay_pieces);
    EXPECT_EQ(relay_->bytes_carried(), relay_bytes);
    EXPECT_EQ(lane_->multipath_copies(), 1u);

    std::vector<uint8_t> kv(host_kv_.size());
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    // The CPU twin's copy of every chunk, and of the chunks before the stop.
    std::vector<uint8_t> all_kv = kv_before, some_kv = kv_before;
    std::vector<uint8_t> all_l1 = l1_before;
    const std::vector<kernels::ChunkCopy> host_chunks = Chunks(all_l1.data());
    if (store_) {
      ASSERT_TRUE(kernels::GatherChunksCpu(Groups(all_kv.data())[0].group, host_chunks.data(),
                                           host_chunks.size())
                      .ok());
      EXPECT_EQ(kv, kv_before) << "a store wrote the engine's memory";
      const uint64_t group_bytes = FlatGroupBytes(l.shape());
      for (size_t j = 0; j < plan_.chunks; ++j) {
        const uint64_t slot = order_[j] * chunk_bytes_;
        if (j < stopped_at) {
          const uint64_t at_group = slot + kernels::test::kFlatOffsetBytes;
          EXPECT_EQ(std::memcmp(l1_ + at_group, all_l1.data() + at_group, group_bytes), 0)
              << "chunk " << j << ", enqueued before the stop, differs from the CPU twin's";
        } else {
          EXPECT_EQ(std::memcmp(l1_ + slot, l1_before.data() + slot, chunk_bytes_), 0)
              << "chunk " << j << ", left out, was written to L1";
        }
      }
    } else if (!plan_.layer_wise) {
      // Chunks own their blocks: those from the stop on keep their bytes.
      ASSERT_TRUE(
          kernels::ScatterChunksCpu(Groups(some_kv.data())[0].group, host_chunks.data(), stopped_at)
              .ok());
      EXPECT_EQ(kv, some_kv) << "chunks [0, " << stopped_at << ") written, no other";
    } else {
      // Layer by layer: the steps before the stopped one are complete and
      // their slots written; those after it (and the stopped one where it
      // stopped before its first batch) untouched, their slots not written.
      ASSERT_TRUE(kernels::ScatterChunksCpu(Groups(all_kv.data())[0].group, host_chunks.data(),
                                            host_chunks.size())
                      .ok());
      const bool stopped_step_untouched = batches[at].step != left_out.step;
      const uint64_t layer_bytes = LayerExtentBytes(l.geometry);
      for (size_t s = 0; s < steps.size(); ++s) {
        for (uint32_t slot : steps[s].slots) {
          EXPECT_EQ(board_->Value(slot).value_or(0) == kSequence, s < left_out.step)
              << "slot " << slot << " of step " << s << ", the copy stopped in step "
              << left_out.step;
        }
        if (s == left_out.step && !stopped_step_untouched) continue;  // some of its batches went
        const std::vector<uint8_t>& want = s < left_out.step ? all_kv : kv_before;
        const auto [first, count] = steps[s].slices[0];
        for (uint32_t k = first; k < first + count; ++k) {
          EXPECT_EQ(std::memcmp(kv.data() + l.layer_offset(k), want.data() + l.layer_offset(k),
                                layer_bytes),
                    0)
              << "layer " << k << " of step " << s << ", the copy stopped in step "
              << left_out.step;
        }
      }
    }

    // The lane copies the next request whole, over both paths.
    host_kv_ = kv;
    std::memcpy(all_l1.data(), l1_, l1_bytes_);
    all_kv = kv;
    ASSERT_TRUE((store_ ? kernels::GatherChunksCpu(Groups(all_kv.data())[0].group,
                                                   host_chunks.data(), host_chunks.size())
                        : kernels::ScatterChunksCpu(Groups(all_kv.data())[0].group,
                                                    host_chunks.data(), host_chunks.size()))
                    .ok());
    on_relay_piece_ = nullptr;
    signal.sequence = kSequence + 1;
    CopyDeadlines none;
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    const Status again = lane_->Copy(layout, Chunks(l1_), slabs_, none, signalled);
    ASSERT_TRUE(again.ok()) << again.ToString();
    EXPECT_EQ(none.missed, std::vector<uint8_t>(plan_.chunks, 0));
    ASSERT_EQ(cudaSetDevice(kTarget), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (store_) {
      const uint64_t group_bytes = FlatGroupBytes(l.shape());
      for (size_t j = 0; j < plan_.chunks; ++j) {
        const uint64_t at_group = order_[j] * chunk_bytes_ + kernels::test::kFlatOffsetBytes;
        EXPECT_EQ(std::memcmp(l1_ + at_group, all_l1.data() + at_group, group_bytes), 0)
            << "chunk " << j << " of the copy after the stop";
      }
    } else {
      EXPECT_EQ(kv, all_kv) << "the copy after the stop";
    }
    if (plan_.layer_wise) {
      for (uint32_t k = 0; k < kLayers; ++k)
        EXPECT_EQ(board_->Value(k).value_or(0), kSequence + 1) << "slot " << k;
    }
    EXPECT_FALSE(relay_->failed()) << relay_->failure();
    EXPECT_EQ(lane_->multipath_copies(), 2u);
  }
};

// dma only (direct mode checks no deadline once its kernels are launched):
// a retrieve and a store of a chunk a batch, and a layer-wise retrieve.
std::vector<Case> DeadlineCases() {
  std::vector<Case> cases;
  for (TestLayout l : AllLayouts()) {
    l.num_layers = kLayers;
    cases.push_back({l, TransferMode::kDma, Scenario::kManyChunksByLayers, Direction::kRetrieve});
    cases.push_back({l, TransferMode::kDma, Scenario::kManyChunksByLayers, Direction::kStore});
    cases.push_back({l, TransferMode::kDma, Scenario::kLayerWise, Direction::kRetrieve});
  }
  return cases;
}

TEST_P(CudaMultipathDeadlineTest, AStopMidCopyLeavesOutTheBatchesAfterIt) { StopAndCheck(); }

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMultipathDeadlineTest, ::testing::ValuesIn(DeadlineCases()),
                         NameOf);

}  // namespace
}  // namespace kvstash::backends
