// GPU-side completion on CUDA streams against a real kvstashd (both transfer
// modes): the engine's stream passes its wait only once the data is in its
// blocks (a check kernel enqueued right behind the wait sees every byte),
// per layer range; a store's gather waits for the engine's stream and says
// when the blocks may be reused; and failures (a bad block, a gate never
// opened, a killed daemon) release the stream, never leave it waiting.
// Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <algorithm>

#include <chrono>
#include <thread>

#include "gpu.h"
#include "kvstash/client.h"
#include "kvstash/completion_board.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda_memory.h"
#include "kvstash/gpu_completion.h"
#include "layouts.h"
#include "stream_probe.h"

namespace kvstash::testing {
namespace {

constexpr uint32_t kLayers = 8;
constexpr uint32_t kBlocks = 64;
constexpr uint32_t kChunks = 3;  // of 64 tokens: 4 blocks each
constexpr uint32_t kDst = 32;    // first block retrieved into
constexpr uint8_t kPoisonByte = 0xCD;
using Clock = std::chrono::steady_clock;

uint8_t LayerByte(uint32_t layer, uint8_t salt = 0) { return uint8_t(layer + 1 + salt); }

class GpuCompletionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KVSTASH_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto daemon = StartCudaDaemon(GetParam());
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    client_ = Connect(std::chrono::seconds(30));
    ASSERT_NE(client_, nullptr);
    auto board = CompletionBoard::Create(64, 0);
    ASSERT_TRUE(board.ok()) << board.status().ToString();
    board_ = std::move(*board);
    LayerGeometry g = kernels::test::Geometry(2, 16, 2, 256, 64, DType::kBF16);
    g.num_blocks = kBlocks;
    geometry_ = kernels::test::BlockFirstNhd(g);
    extent_ = LayerExtentBytes(geometry_);
    auto kv = cuda::DeviceBuffer::Allocate(kLayers * extent_);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    kv_ = std::move(*kv);
    auto counters = cuda::DeviceBuffer::Allocate(64 * sizeof(unsigned long long));
    ASSERT_TRUE(counters.ok());
    counters_ = std::move(*counters);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMemset(counters_.data(), 0, counters_.size()), cudaSuccess);
    reg_ = Register(*client_);
    tokens_.resize(kChunks * 64);
    for (size_t t = 0; t < tokens_.size(); ++t) tokens_[t] = int32_t(t * 7 + 3);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  std::unique_ptr<Client> Connect(std::chrono::milliseconds timeout) {
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = timeout;
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }
  RegisteredKv Register(Client& client) {
    RegisterOptions options;
    options.model = "gpu-completion-" + GetParam();
    std::vector<CudaLayer> layers;
    for (uint32_t l = 0; l < kLayers; ++l) layers.push_back({kv_.data() + l * extent_, geometry_});
    EXPECT_TRUE(AddCudaLayers(layers, options).ok());
    options.board = board_->shm();
    auto reg = client.RegisterKV(options).get();
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    return reg.ok() ? *reg : RegisteredKv{};
  }
  uint8_t* BlockOf(uint32_t layer, uint32_t block) {
    return kv_.data() + layer * extent_ + block * geometry_.block_stride;
  }
  std::vector<ChunkBlocks> Chunks(const RegisteredKv& reg, uint32_t first_block) {
    std::vector<uint32_t> table;
    for (uint32_t b = 0; b < kChunks * 4; ++b) table.push_back(first_block + b);
    auto chunks = PromptChunks(reg, tokens_.data(), tokens_.size(), table.data(), table.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }
  // Source blocks [0, 12) of layer l hold LayerByte(l, salt); destination
  // blocks [kDst, kDst + 12) are poisoned.
  void FillSource(uint8_t salt, cudaStream_t stream) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      ASSERT_EQ(cudaMemsetAsync(BlockOf(l, 0), LayerByte(l, salt),
                                kChunks * 4 * geometry_.block_stride, stream),
                cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(BlockOf(l, kDst), kPoisonByte, kChunks * 4 * geometry_.block_stride,
                                stream),
                cudaSuccess);
    }
  }
  // On the stream: counts layer l's destination bytes that are not LayerByte(l, salt).
  void EnqueueCheck(uint32_t layer, uint8_t salt, uint32_t counter) {
    EnqueueCountMismatches(
        BlockOf(layer, kDst), kChunks * 4 * geometry_.block_stride, LayerByte(layer, salt),
        reinterpret_cast<unsigned long long*>(counters_.data()) + counter, stream_);
  }
  std::vector<unsigned long long> Counters() {
    std::vector<unsigned long long> out(64);
    EXPECT_EQ(cudaMemcpy(out.data(), counters_.data(), counters_.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
  // Whether the stream drains within `limit` (it must never hang).
  bool StreamDrains(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return true;
      if (state != cudaErrorNotReady) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<CompletionBoard> board_;
  LayerGeometry geometry_;
  uint64_t extent_ = 0;
  cuda::DeviceBuffer kv_;
  cuda::DeviceBuffer counters_;
  cudaStream_t stream_ = nullptr;
  RegisteredKv reg_;
  std::vector<int32_t> tokens_;
};

TEST_P(GpuCompletionTest, TheEngineStreamSeesEveryByteTheMomentItsWaitPasses) {
  FillSource(0, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  auto stored = client_->Store(reg_.id, Chunks(reg_, 0)).get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  // The wait is in the stream when RetrieveOnStream returns; the checks
  // queue right behind it, before the CPU reply is even looked at.
  auto load = client_->RetrieveOnStream(reg_.id, Chunks(reg_, kDst), *board_, stream_);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  for (uint32_t l = 0; l < kLayers; ++l) EnqueueCheck(l, 0, l);
  ASSERT_TRUE(StreamDrains());
  const auto counts = Counters();
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(counts[l], 0u) << "layer " << l;
  EXPECT_EQ(board_->status(load->signal.slot), 0u);
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
}

TEST_P(GpuCompletionTest, EachLayerRangeIsCompleteWhenItsWaitPasses) {
  FillSource(0, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_TRUE(client_->Store(reg_.id, Chunks(reg_, 0)).get().ok());
  constexpr uint32_t kRanges = 4;
  auto load =
      client_->RetrieveOnStream(reg_.id, Chunks(reg_, kDst), *board_, stream_, 0, 0, kRanges);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  for (uint32_t k = 0; k < kRanges; ++k) {
    ASSERT_TRUE(board_->WaitLayerRange(stream_, load->signal, k).ok());
    for (uint32_t l = LayerRangeBegin(kLayers, kRanges, k);
         l < LayerRangeBegin(kLayers, kRanges, k + 1); ++l) {
      EnqueueCheck(l, 0, l);
    }
  }
  ASSERT_TRUE(StreamDrains());
  const auto counts = Counters();
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(counts[l], 0u) << "layer " << l;
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (uint32_t k = 0; k < kRanges; ++k) EXPECT_EQ(board_->status(load->signal.slot + k), 0u);
}

// One range per layer: the lane copies them in growing steps (1, 1, 2, 4
// layers), and still no layer's wait passes before its bytes are there.
TEST_P(GpuCompletionTest, EveryLayerInItsOwnRangeIsCompleteWhenItsWaitPasses) {
  FillSource(3, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_TRUE(client_->Store(reg_.id, Chunks(reg_, 0)).get().ok());
  for (int round = 0; round < 2; ++round) {  // the second with the registration's cached plan
    for (uint32_t l = 0; l < kLayers; ++l) {
      ASSERT_EQ(cudaMemsetAsync(BlockOf(l, kDst), kPoisonByte, kChunks * 4 * geometry_.block_stride,
                                stream_),
                cudaSuccess);
    }
    auto load =
        client_->RetrieveOnStream(reg_.id, Chunks(reg_, kDst), *board_, stream_, 0, 0, kLayers);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    for (uint32_t k = 0; k < kLayers; ++k) {
      ASSERT_TRUE(board_->WaitLayerRange(stream_, load->signal, k).ok());
      EnqueueCheck(k, 3, round * kLayers + k);
    }
    ASSERT_TRUE(StreamDrains());
    auto outcomes = load->outcomes.get();
    ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    for (uint32_t k = 0; k < kLayers; ++k) EXPECT_EQ(board_->status(load->signal.slot + k), 0u);
  }
  const auto counts = Counters();
  for (uint32_t i = 0; i < 2 * kLayers; ++i) EXPECT_EQ(counts[i], 0u) << "check " << i;
}

TEST_P(GpuCompletionTest, StoreGathersAfterTheEngineStreamAndSaysWhenBlocksMayBeReused) {
  FillSource(0, stream_);
  // The engine's stream is busy, then writes new KV (salt 0x40): the gather
  // must see the new bytes, never the old ones.
  EnqueueSpin(50000, stream_);
  for (uint32_t l = 0; l < kLayers; ++l) {
    ASSERT_EQ(cudaMemsetAsync(BlockOf(l, 0), LayerByte(l, 0x40),
                              kChunks * 4 * geometry_.block_stride, stream_),
              cudaSuccess);
  }
  auto save = client_->StoreOnStream(reg_.id, Chunks(reg_, 0), *board_, stream_);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  ASSERT_TRUE(board_->WaitReusable(stream_, save->signal).ok());
  // Reuse: the engine overwrites its blocks once the daemon has read them.
  for (uint32_t l = 0; l < kLayers; ++l) {
    ASSERT_EQ(cudaMemsetAsync(BlockOf(l, 0), 0xEE, kChunks * 4 * geometry_.block_stride, stream_),
              cudaSuccess);
  }
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  ASSERT_TRUE(StreamDrains());
  EXPECT_EQ(board_->status(save->signal.slot + 1), 0u);
  auto load = client_->RetrieveOnStream(reg_.id, Chunks(reg_, kDst), *board_, stream_);
  ASSERT_TRUE(load.ok());
  for (uint32_t l = 0; l < kLayers; ++l) EnqueueCheck(l, 0x40, l);
  ASSERT_TRUE(StreamDrains());
  const auto counts = Counters();
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(counts[l], 0u) << "layer " << l;
}

TEST_P(GpuCompletionTest, ABadBlockReleasesTheStreamWithTheError) {
  auto chunks = Chunks(reg_, kDst);
  chunks[1].block_ids[2] = 100000;
  auto load = client_->RetrieveOnStream(reg_.id, chunks, *board_, stream_);
  ASSERT_TRUE(load.ok());
  ASSERT_TRUE(StreamDrains()) << "the engine's stream hangs after a refused retrieve";
  auto outcomes = load->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(board_->status(load->signal.slot), uint32_t(StatusCode::kOutOfRange));
}

TEST_P(GpuCompletionTest, AGateNeverOpenedIsReleasedByTheDaemonAtTheDeadline) {
  FillSource(0, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  auto client = Connect(std::chrono::milliseconds(400));
  ASSERT_NE(client, nullptr);
  const RegisteredKv reg = Register(*client);
  // No stream: nobody writes the gate; the daemon's lane holds the store
  // (checking the gate from the CPU) until the deadline, then gives it up.
  auto save = client->StoreOnStream(reg.id, Chunks(reg, 0), *board_, nullptr);
  ASSERT_TRUE(save.ok());
  ASSERT_TRUE(board_->WaitReusable(stream_, save->signal).ok());
  ASSERT_TRUE(StreamDrains(std::chrono::milliseconds(5000)));
  auto outcomes = save->outcomes.get();
  if (outcomes.ok()) {
    for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kFailed);
  } else {
    EXPECT_EQ(outcomes.status().code(), StatusCode::kTimedOut);
  }
  EXPECT_NE(board_->status(save->signal.slot + 1), 0u);
  // The store lane is free again and the abandoned reservation goes: the
  // same chunks store ungated. The daemon releases the slots before it
  // drops the reservation (slots first, so that no slot is written once
  // the reply returned it to the board), so a store right after the slot
  // may still find the chunks "being stored" for a moment.
  // Each chunk counts once some attempt stored it (a later attempt then
  // finds it already present).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::vector<bool> stored;
  do {
    auto again = client->Store(reg.id, Chunks(reg, 0)).get();
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    stored.resize(again->size(), false);
    for (size_t i = 0; i < again->size(); ++i) {
      if ((*again)[i].result == ChunkResult::kStored) stored[i] = true;
    }
  } while (std::count(stored.begin(), stored.end(), false) > 0 &&
           std::chrono::steady_clock::now() < until);
  for (size_t i = 0; i < stored.size(); ++i) EXPECT_TRUE(stored[i]) << "chunk " << i;
}

TEST_P(GpuCompletionTest, AKilledDaemonNeverLeavesTheStreamWaiting) {
  FillSource(0, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_TRUE(client_->Store(reg_.id, Chunks(reg_, 0)).get().ok());
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  auto load = client_->RetrieveOnStream(reg_.id, Chunks(reg_, kDst), *board_, stream_, 0, 0, 2);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  ASSERT_TRUE(board_->WaitLayerRange(stream_, load->signal, 0).ok());
  ASSERT_TRUE(board_->WaitLayerRange(stream_, load->signal, 1).ok());
  auto outcomes = load->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  ASSERT_TRUE(StreamDrains()) << "the engine's stream hangs after the daemon died";
  EXPECT_NE(board_->status(load->signal.slot), 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, GpuCompletionTest, ::testing::Values("dma", "direct"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvstash::testing
