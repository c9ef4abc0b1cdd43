// The copy fence (docs/protocol.md "The copy fence"): once libkvstash has
// reported a Store or Retrieve done or failed, for whatever reason (reply,
// deadline, Goodbye, lost heartbeat, closed connection), kvstashd writes
// none of its blocks. An engine pump keeps many retrieves in flight, each
// into blocks of its own; on every report the engine reuses (poisons) the
// request's blocks at once, as a real engine would, and at the end every
// such block must still hold the poison: a byte of KV there was written
// after its report. The daemon is stopped (SIGTERM), frozen (SIGSTOP) or
// killed while the pump runs.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "daemon_process.h"
#include "engine_kv.h"
#include "kvstash/client.h"
#include "retrieve_pump.h"

namespace kvstash::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kSeed = 0xfe7ce;
constexpr uint8_t kReused = 0x5A;  // what the engine writes into blocks it reuses
// One block per chunk, so that a retrieve is many copy units, and 8 MiB a
// retrieve, so that the daemon, on one copy thread, is busy copying while
// the pump runs.
constexpr uint32_t kChunkBlocks = 256;  // chunks (= blocks) per retrieve
constexpr uint32_t kRegions = 16;       // target regions, one per request in flight

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

class CopyFence : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start({"--chunk-tokens", "16", "--l1-gb", "0.03125",
                                        "--l1-slice-mb", "4", "--copy-threads", "1"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    EngineShape shape;
    shape.num_layers = 2;
    shape.num_heads = 1;
    shape.head_bytes = 512;
    shape.block_tokens = 16;
    shape.num_blocks = kChunkBlocks * (kRegions + 1);
    auto engine = EngineKv::Create(shape);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_.emplace(std::move(*engine));
    client_ = Connect(std::chrono::milliseconds(30000));
    ASSERT_NE(client_, nullptr);
    tokens_ = PromptTokens(1, kChunkBlocks * shape.block_tokens, 0);
    engine_->Fill(kSeed, tokens_, Blocks(0, kChunkBlocks));
    auto stored = client_->Store(reg_.id, Chunks(Blocks(0, kChunkBlocks))).get();
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    for (const auto& o : *stored) ASSERT_EQ(o.result, ChunkResult::kStored);
    for (uint32_t r = 0; r < kRegions; ++r) {
      Reuse(r);
      region_chunks_.push_back(Chunks(Region(r)));
    }
  }
  void TearDown() override {
    if (pump_) pump_->Stop();
  }
  // A client with its own registration of the engine's memory.
  std::unique_ptr<Client> Connect(std::chrono::milliseconds timeout) {
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = timeout;
    auto client = Client::Connect(options);
    if (!client.ok()) {
      std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
      return nullptr;
    }
    auto reg = (*client)->RegisterKV(engine_->Registration("fence-model")).get();
    if (!reg.ok()) {
      std::fprintf(stderr, "register: %s\n", reg.status().ToString().c_str());
      return nullptr;
    }
    reg_ = *reg;
    return std::move(*client);
  }

  std::vector<uint32_t> Region(uint32_t r) const {
    return Blocks(kChunkBlocks * (r + 1), kChunkBlocks);
  }
  std::vector<ChunkBlocks> Chunks(const std::vector<uint32_t>& blocks) const {
    auto chunks = PromptChunks(reg_, tokens_.data(), tokens_.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }
  // Starts the engine's retrieves and waits until a few completed, so that
  // copies are surely running.
  void StartPump() {
    pump_.emplace(
        *client_, reg_.id, kRegions, [this](uint32_t r) { return region_chunks_[r]; },
        [this](uint32_t r) { Reuse(r); });
    pump_->Start();
    ASSERT_TRUE(pump_->WaitForRetrieved(4, std::chrono::seconds(20)));
    ASSERT_TRUE(pump_->WaitForAllInFlight(std::chrono::seconds(5)));
  }
  // The engine reuses region r: it marks the first byte of every row, which
  // any later copy into the row overwrites (marking is quick, so that the
  // engine, not its marking, keeps kvstashd busy).
  void Reuse(uint32_t r) {
    ForEachRow(r, [](uint8_t* row) { row[0] = kReused; });
  }
  // Rows written after the engine reused them: after their report.
  uint64_t WrittenAfterReport() {
    uint64_t rows = 0;
    for (uint32_t r = 0; r < kRegions; ++r) {
      ForEachRow(r, [&](uint8_t* row) { rows += row[0] != kReused; });
    }
    return rows;
  }
  template <typename F>
  void ForEachRow(uint32_t r, F f) {
    const EngineShape& s = engine_->shape();
    for (uint32_t block : Region(r))
      for (uint32_t l = 0; l < s.num_layers; ++l)
        for (uint32_t k = 0; k < 2; ++k)
          for (uint32_t t = 0; t < s.block_tokens; ++t)
            for (uint32_t h = 0; h < s.num_heads; ++h) f(engine_->Row(l, k, block, t, h));
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::optional<EngineKv> engine_;
  std::unique_ptr<Client> client_;
  RegisteredKv reg_;
  std::vector<int32_t> tokens_;
  std::vector<std::vector<ChunkBlocks>> region_chunks_;  // computed once: the pump is fast
  std::optional<RetrievePump> pump_;
};

TEST_F(CopyFence, NoBlockIsWrittenAfterAStoppingDaemonsRequestsAreReported) {
  StartPump();
  ASSERT_GT(pump_->counts().in_flight, 0u);
  const auto stopped = Clock::now();
  pump_->StopSending();
  daemon_->Signal(SIGTERM);
  pump_->Stop();  // returns once every request was reported
  const RetrievePump::Counts counts = pump_->counts();
  EXPECT_EQ(daemon_->Wait(), 0) << "kvstashd did not stop cleanly";
  EXPECT_EQ(WrittenAfterReport(), 0u)
      << "kvstashd wrote blocks the engine had been told it could reuse";
  EXPECT_GT(counts.failed + counts.failed_chunks, 0u)
      << "the stop cut nothing off: the test proved nothing";
  const double ms = Ms(counts.last_report - stopped);
  std::printf(
      "SIGTERM: %llu requests failed, %llu replied with failed chunks; every block "
      "reusable %.1f ms after the signal\n",
      (unsigned long long)counts.failed, (unsigned long long)counts.failed_chunks, ms);
  RecordProperty("sigterm_to_reusable_ms", std::to_string(ms));
}

TEST_F(CopyFence, AFrozenDaemonsRequestsAreReportedOnlyOnceItCanWriteNoMore) {
  StartPump();
  pump_->StopSending();
  daemon_->Signal(SIGSTOP);
  // libkvstash's heartbeat gives the daemon up after about a second; what
  // it then reports must stay true when the daemon resumes.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const RetrievePump::Counts frozen = pump_->counts();
  const auto resumed = Clock::now();
  daemon_->Signal(SIGCONT);
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_EQ(WrittenAfterReport(), 0u)
      << "kvstashd wrote, after SIGCONT, blocks the engine had been told it could reuse";
  std::printf(
      "SIGSTOP: %llu requests reported failed while the daemon was frozen, %llu still held "
      "by its copy; every block reusable %.1f ms after SIGCONT\n",
      (unsigned long long)(frozen.failed + frozen.failed_chunks),
      (unsigned long long)frozen.in_flight, Ms(counts.last_report - resumed));
}

TEST_F(CopyFence, AKilledDaemonsRequestsAreReportedAtOnce) {
  StartPump();
  // Its locks go while its process closes its files; a failure is reported
  // only once the process is gone (copies it queued on a GPU run until then).
  pump_->CheckFailures([this] { return daemon_->exited(); });
  const auto killed = Clock::now();
  pump_->StopSending();
  daemon_->Signal(SIGKILL);
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  daemon_->Wait();
  EXPECT_EQ(WrittenAfterReport(), 0u);
  EXPECT_GT(counts.failed + counts.failed_chunks, 0u)
      << "the kill cut nothing off: the test proved nothing";
  EXPECT_EQ(counts.failed_too_early, 0u)
      << "requests were reported failed before kvstashd's process was gone";
  EXPECT_LT(counts.last_report - killed, std::chrono::seconds(2));
  std::printf("SIGKILL: %llu requests failed; every block reusable %.1f ms after the signal\n",
              (unsigned long long)counts.failed, Ms(counts.last_report - killed));
}

TEST_F(CopyFence, RequestsPastTheirDeadlineWriteNothingAfterTheirReport) {
  // A client whose timeout is shorter than the daemon's queue: many of its
  // retrieves time out while the daemon is alive and copying them.
  // (Hello and RegisterKV must fit in it too: a loaded machine may need
  // a second try.)
  client_ = nullptr;
  for (int attempt = 0; attempt < 5 && client_ == nullptr; ++attempt) {
    client_ = Connect(std::chrono::milliseconds(25));
  }
  ASSERT_NE(client_, nullptr);
  StartPump();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  pump_->Stop();
  const RetrievePump::Counts counts = pump_->counts();
  EXPECT_GT(counts.failed + counts.failed_chunks, 0u)
      << "nothing timed out: the test proved nothing";
  std::printf(
      "deadline: %llu requests timed out; the latest reported %.1f ms after it was sent "
      "(timeout 25 ms)\n",
      (unsigned long long)counts.timed_out, Ms(counts.longest_timed_out));
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_EQ(WrittenAfterReport(), 0u);
}

}  // namespace
}  // namespace kvstash::testing
