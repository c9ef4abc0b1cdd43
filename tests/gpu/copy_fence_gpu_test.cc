// The copy fence (docs/protocol.md "The copy fence") on the cuda backend, in
// both transfer modes: once libkvstash has reported a retrieve done or
// failed, kvstashd writes none of its blocks in GPU memory, also when it is
// stopped (SIGTERM), frozen (SIGSTOP) or killed with retrieves in flight.
// An engine keeps one retrieve in flight per region of its blocks and, on
// every report, overwrites the region at once (it reuses the blocks); at the
// end every region must still hold what it wrote. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "engine_kv.h"
#include "gpu.h"
#include "kvstash/client.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda_memory.h"
#include "layouts.h"
#include "retrieve_pump.h"

namespace kvstash::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kReused = 0x5A;       // what the engine writes into blocks it reuses
constexpr uint32_t kChunkBlocks = 256;  // chunks (one block each) per retrieve
constexpr uint32_t kRegions = 16;       // target regions, one per request in flight
constexpr uint32_t kLayers = 2;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

class CopyFenceGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KVSTASH_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // One block per chunk: a retrieve is many chunks, each a copy unit.
    auto daemon = DaemonProcess::Start({"--backend", "cuda", "--transfer-mode", GetParam(),
                                        "--chunk-tokens", "16", "--l1-gb", "0.25", "--l1-slice-mb",
                                        "32", "--staging-mb", "32"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    // vLLM flash-attn NHD, 16 tokens x 8 heads x 256 B: 32 KiB per block and kv.
    geometry_ = kernels::test::Geometry(2, 16, 8, 256, 16, DType::kBF16);
    geometry_.num_blocks = kChunkBlocks * (kRegions + 1);
    geometry_ = kernels::test::KvFirstNhd(geometry_);
    layer_bytes_ = LayerExtentBytes(geometry_);
    auto memory = cuda::DeviceBuffer::Allocate(kLayers * layer_bytes_);
    ASSERT_TRUE(memory.ok()) << memory.status().ToString();
    memory_ = std::move(*memory);
    // Region 0 holds the KV to store: a pattern no region ever holds.
    std::vector<uint8_t> pattern(geometry_.block_stride * kChunkBlocks);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = uint8_t(i * 131 + 7) | 1;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t k = 0; k < 2; ++k) {
        ASSERT_EQ(cudaMemcpy(BlockAddress(l, k, 0), pattern.data(), pattern.size(),
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = std::chrono::seconds(30);
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    RegisterOptions reg_options;
    reg_options.model = "fence-model";
    std::vector<CudaLayer> layers;
    for (uint32_t l = 0; l < kLayers; ++l)
      layers.push_back({memory_.data() + l * layer_bytes_, geometry_});
    ASSERT_TRUE(AddCudaLayers(layers, reg_options).ok());
    auto reg = client_->RegisterKV(reg_options).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    reg_ = *reg;
    tokens_ = PromptTokens(2, kChunkBlocks * geometry_.block_tokens, 0);
    auto stored = client_->Store(reg_.id, Chunks(0)).get();
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    for (const auto& o : *stored) ASSERT_EQ(o.result, ChunkResult::kStored);
    for (uint32_t r = 1; r <= kRegions; ++r) Reuse(r);
  }
  void TearDown() override {
    if (pump_) pump_->Stop();
  }

  uint8_t* BlockAddress(uint32_t layer, uint32_t kv, uint32_t block) const {
    return memory_.data() + layer * layer_bytes_ + kv * geometry_.kv_stride +
           uint64_t(block) * geometry_.block_stride;
  }
  // Region r (1..kRegions) of the engine's blocks; region 0 was stored.
  std::vector<ChunkBlocks> Chunks(uint32_t region) const {
    const std::vector<uint32_t> blocks = Blocks(region * kChunkBlocks, kChunkBlocks);
    auto chunks = PromptChunks(reg_, tokens_.data(), tokens_.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }
  // The engine reuses region r: its own (synchronous) writes over it.
  void Reuse(uint32_t region) const {
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t k = 0; k < 2; ++k) {
        EXPECT_EQ(cudaMemset(BlockAddress(l, k, region * kChunkBlocks), kReused,
                             uint64_t(kChunkBlocks) * geometry_.block_stride),
                  cudaSuccess);
      }
    }
    // Done before the report goes on: a later write of the daemon's lands
    // after these, where the check finds it.
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  void StartPump() {
    pump_.emplace(
        *client_, reg_.id, kRegions, [this](uint32_t r) { return Chunks(r + 1); },
        [this](uint32_t r) { Reuse(r + 1); });
    pump_->Start();
    ASSERT_TRUE(pump_->WaitForRetrieved(4, std::chrono::seconds(20)));
    ASSERT_TRUE(pump_->WaitForAllInFlight(std::chrono::seconds(5)));
  }
  // Bytes of the regions that are not what the engine wrote last.
  uint64_t WrittenAfterReport() const {
    std::vector<uint8_t> host(uint64_t(kChunkBlocks) * geometry_.block_stride);
    uint64_t bytes = 0;
    for (uint32_t r = 1; r <= kRegions; ++r) {
      for (uint32_t l = 0; l < kLayers; ++l) {
        for (uint32_t k = 0; k < 2; ++k) {
          EXPECT_EQ(cudaMemcpy(host.data(), BlockAddress(l, k, r * kChunkBlocks), host.size(),
                               cudaMemcpyDeviceToHost),
                    cudaSuccess);
          for (uint8_t b : host) bytes += b != kReused;
        }
      }
    }
    return bytes;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  LayerGeometry geometry_;
  uint64_t layer_bytes_ = 0;
  cuda::DeviceBuffer memory_;
  RegisteredKv reg_;
  std::vector<int32_t> tokens_;
  std::optional<RetrievePump> pump_;
};

TEST_P(CopyFenceGpu, NoBlockIsWrittenAfterAStoppingDaemonsRequestsAreReported) {
  StartPump();
  const auto stopped = Clock::now();
  pump_->StopSending();
  daemon_->Signal(SIGTERM);
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_EQ(WrittenAfterReport(), 0u)
      << "kvstashd wrote GPU blocks the engine had been told it could reuse";
  std::printf(
      "%s SIGTERM: %llu failed, %llu with failed chunks; every block reusable %.2f ms "
      "after the signal\n",
      GetParam().c_str(), (unsigned long long)counts.failed,
      (unsigned long long)counts.failed_chunks, Ms(counts.last_report - stopped));
}

TEST_P(CopyFenceGpu, AFrozenDaemonsRequestsAreReportedOnlyOnceItCanWriteNoMore) {
  StartPump();
  pump_->StopSending();
  daemon_->Signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the heartbeat
  const RetrievePump::Counts frozen = pump_->counts();
  const auto resumed = Clock::now();
  daemon_->Signal(SIGCONT);
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_EQ(WrittenAfterReport(), 0u)
      << "kvstashd wrote, after SIGCONT, GPU blocks the engine had been told it could reuse";
  std::printf(
      "%s SIGSTOP: %llu held by a copy while frozen; every block reusable %.2f ms after "
      "SIGCONT\n",
      GetParam().c_str(), (unsigned long long)frozen.in_flight, Ms(counts.last_report - resumed));
}

TEST_P(CopyFenceGpu, AKilledDaemonsRequestsAreReportedAtOnce) {
  StartPump();
  // Its locks go while its process closes its files, and copies it queued
  // on the GPU (dma mode) may still run until the driver has torn its
  // context down: a failure is reported only once the process is gone.
  pump_->CheckFailures([this] { return daemon_->exited(); });
  const auto killed = Clock::now();
  pump_->StopSending();
  daemon_->Signal(SIGKILL);
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  daemon_->Wait();
  EXPECT_EQ(WrittenAfterReport(), 0u)
      << "kvstashd's GPU copies wrote blocks the engine had been told it could reuse";
  // Far below the 30 s deadline: the report waits for the process, not for it.
  EXPECT_LT(counts.last_report - killed, std::chrono::seconds(10));
  // A request no lane was copying (its byte free while kvstashd's own byte
  // was still held) is reported at once: nothing of it can land. Only those
  // a lane held wait for the process to be gone, and a GPU context's
  // teardown takes a few hundred ms.
  std::printf(
      "%s SIGKILL: %llu requests failed (%llu of them, which no copy held, before the process "
      "was gone); every block reusable %.2f ms after the signal (the process's exit "
      "included)\n",
      GetParam().c_str(), (unsigned long long)counts.failed,
      (unsigned long long)counts.failed_too_early, Ms(counts.last_report - killed));
}

INSTANTIATE_TEST_SUITE_P(Modes, CopyFenceGpu, ::testing::Values("dma", "direct"));

}  // namespace
}  // namespace kvstash::testing
