// GPU-side completion on the host backend: the board protocol (registration,
// slot bounds, sequences, status words, release on failure and at the
// deadline) with CPU writes in place of stream operations, so that it is
// tested without a GPU. tests/gpu checks the same on CUDA streams.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "kvstash/completion_board.h"
#include "kvstash/gpu_completion.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0xb0a4d;
using Clock = std::chrono::steady_clock;

class GpuCompletion : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    auto board = CompletionBoard::Create(16);
    ASSERT_TRUE(board.ok()) << board.status().ToString();
    board_ = std::move(*board);
    RegisterOptions options = engine_->Registration("board-model");
    options.board = board_->shm();
    auto reg = client_->RegisterKV(options).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    breg_ = *reg;
  }
  std::vector<ChunkBlocks> BoardChunks(const std::vector<int32_t>& tokens,
                                       const std::vector<uint32_t>& blocks) {
    auto chunks = PromptChunks(breg_, tokens.data(), tokens.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return chunks.ok() ? *chunks : std::vector<ChunkBlocks>{};
  }
  // Polls slot k of `signal` from the CPU, as a waiting stream would.
  bool WaitReleased(const BoardSignal& signal, uint32_t k,
                    std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      if (board_->Released(signal, k)) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return false;
  }

  // A second engine on the same board, with its own request timeout: its
  // registration and the chunks of a 64-token prompt over blocks 0-3.
  struct GatedEngine {
    std::unique_ptr<Client> client;
    RegisteredKv reg;
    std::vector<int32_t> tokens;
    std::vector<ChunkBlocks> chunks;
  };
  void ConnectGatedEngine(std::chrono::milliseconds timeout, uint32_t prompt, GatedEngine* out) {
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = timeout;
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    RegisterOptions reg_options = engine_->Registration("gate-model");
    reg_options.board = board_->shm();
    auto reg = (*client)->RegisterKV(reg_options).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    const auto tokens = PromptTokens(prompt, 64, 0);
    auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), Blocks(0, 4).data(), 4);
    ASSERT_TRUE(chunks.ok()) << chunks.status().ToString();
    out->client = std::move(*client);
    out->reg = *reg;
    out->tokens = tokens;
    out->chunks = std::move(*chunks);
  }

  std::unique_ptr<CompletionBoard> board_;
  RegisteredKv breg_;
};

TEST_F(GpuCompletion, RetrieveReleasesItsSlotOnlyOnceEveryByteIsInPlace) {
  const auto tokens = PromptTokens(1, 150, 0);
  engine_->Fill(kSeed, tokens, Blocks(0, 10));
  auto stored = client_->Store(breg_.id, BoardChunks(tokens, Blocks(0, 10))).get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  engine_->Poison(Blocks(100, 10));
  auto load =
      client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(100, 10)), *board_, nullptr);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  ASSERT_TRUE(WaitReleased(load->signal, 0));
  // At the moment of release, before the reply is looked at.
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(100, 10), 0, 150), 0u);
  EXPECT_EQ(board_->status(load->signal.slot), 0u);
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
}

TEST_F(GpuCompletion, LayerRangesAreReleasedOneByOneWithTheirLayers) {
  const auto tokens = PromptTokens(2, 128, 0);
  engine_->Fill(kSeed, tokens, Blocks(0, 8));
  ASSERT_TRUE(client_->Store(breg_.id, BoardChunks(tokens, Blocks(0, 8))).get().ok());
  engine_->Poison(Blocks(200, 8));
  // 4 layers in 3 ranges: [0, 1), [1, 2), [2, 4).
  EXPECT_EQ(LayerRangeBegin(4, 3, 1), 1u);
  EXPECT_EQ(LayerRangeOf(4, 3, 3), 2u);
  auto load = client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(200, 8)), *board_,
                                        nullptr, 0, 0, /*layer_ranges=*/3);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->signal.count, 3u);
  for (uint32_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(WaitReleased(load->signal, k)) << "range " << k;
    EXPECT_EQ(board_->status(load->signal.slot + k), 0u);
    // A range released means every earlier one is too (stream order).
    for (uint32_t j = 0; j < k; ++j) EXPECT_TRUE(board_->Released(load->signal, j));
  }
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(200, 8), 0, 128), 0u);
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
}

TEST_F(GpuCompletion, MoreLayerRangesThanLayersIsRefusedAndReleased) {
  const auto tokens = PromptTokens(3, 64, 0);
  auto load = client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(0, 4)), *board_,
                                        nullptr, 0, 0, /*layer_ranges=*/5);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  auto outcomes = load->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outcomes.status().message().find("1 to 4"), std::string::npos)
      << outcomes.status().message();
  for (uint32_t k = 0; k < 5; ++k) {
    EXPECT_TRUE(board_->Released(load->signal, k));
    EXPECT_EQ(board_->status(load->signal.slot + k), uint32_t(StatusCode::kInvalidArgument));
  }
}

TEST_F(GpuCompletion, MissingChunksReleaseTheSlotWithNotFound) {
  const auto tokens = PromptTokens(4, 128, 0);  // never stored
  auto load =
      client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(0, 8)), *board_, nullptr);
  ASSERT_TRUE(load.ok());
  ASSERT_TRUE(WaitReleased(load->signal, 0));
  EXPECT_EQ(board_->status(load->signal.slot), uint32_t(StatusCode::kNotFound));
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok());
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kMissing);
}

TEST_F(GpuCompletion, PartlyMissingRetrieveCopiesWhatItHasAndSaysNotFound) {
  const auto tokens = PromptTokens(5, 128, 0);
  engine_->Fill(kSeed, tokens, Blocks(0, 8));
  auto chunks = BoardChunks(tokens, Blocks(0, 8));
  ASSERT_TRUE(client_->Store(breg_.id, {chunks[0]}).get().ok());
  engine_->Poison(Blocks(50, 8));
  auto load =
      client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(50, 8)), *board_, nullptr);
  ASSERT_TRUE(load.ok());
  ASSERT_TRUE(WaitReleased(load->signal, 0));
  EXPECT_EQ(board_->status(load->signal.slot), uint32_t(StatusCode::kNotFound));
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(50, 8), 0, 64), 0u);
  auto outcomes = load->outcomes.get();
  ASSERT_TRUE(outcomes.ok());
  EXPECT_EQ((*outcomes)[0].result, ChunkResult::kRetrieved);
  EXPECT_EQ((*outcomes)[1].result, ChunkResult::kMissing);
}

TEST_F(GpuCompletion, ASlotPastTheRegisteredBoardIsRefusedWithItsBounds) {
  // A larger board than the registered one: its slot 20 is past the 16.
  auto other = CompletionBoard::Create(64);
  ASSERT_TRUE(other.ok());
  auto held = (*other)->Take(20);
  ASSERT_TRUE(held.ok());
  const auto tokens = PromptTokens(6, 64, 0);
  auto load =
      client_->RetrieveOnStream(breg_.id, BoardChunks(tokens, Blocks(0, 4)), **other, nullptr);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->signal.slot, 20u);
  auto outcomes = load->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(outcomes.status().message().find("holds 16"), std::string::npos)
      << outcomes.status().message();
  // libkvstash released the slot itself: nothing waits on it.
  EXPECT_TRUE((*other)->Released(load->signal, 0));
  EXPECT_EQ((*other)->status(20), uint32_t(StatusCode::kOutOfRange));
}

TEST_F(GpuCompletion, ARegistrationWithoutABoardRefusesSignals) {
  const auto tokens = PromptTokens(7, 64, 0);
  auto load = client_->RetrieveOnStream(reg_.id, Chunks(tokens, Blocks(0, 4)), *board_, nullptr);
  ASSERT_TRUE(load.ok());
  auto outcomes = load->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outcomes.status().message().find("no completion board"), std::string::npos);
  EXPECT_TRUE(board_->Released(load->signal, 0));
}

TEST_F(GpuCompletion, StoreGathersOnlyAfterTheEngineOpensTheGate) {
  const auto tokens = PromptTokens(8, 128, 0);
  engine_->Poison(Blocks(0, 8), 0x11);  // what the engine has before its writes land
  auto save = client_->StoreOnStream(breg_.id, BoardChunks(tokens, Blocks(0, 8)), *board_, nullptr);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(board_->Released(save->signal, 1)) << "the blocks were read before the gate";
  EXPECT_EQ(save->outcomes.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  // The engine's work lands, then its stream opens the gate.
  engine_->Fill(kSeed, tokens, Blocks(0, 8));
  board_->Release(save->signal.slot, save->signal.sequence, 0);
  ASSERT_TRUE(WaitReleased(save->signal, 1));
  EXPECT_EQ(board_->status(save->signal.slot + 1), 0u);
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kStored);
  engine_->Poison(Blocks(100, 8));
  ASSERT_TRUE(client_->Retrieve(breg_.id, BoardChunks(tokens, Blocks(100, 8))).get().ok());
  EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(100, 8), 0, 128), 0u);
}

TEST_F(GpuCompletion, AStoreWaitingForItsGateHoldsUpNoOtherStore) {
  const auto gated_tokens = PromptTokens(10, 64, 0);
  auto save =
      client_->StoreOnStream(breg_.id, BoardChunks(gated_tokens, Blocks(0, 4)), *board_, nullptr);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  // Another store of the same lane, ungated, completes while the first waits.
  const auto tokens = PromptTokens(11, 64, 0);
  engine_->Fill(kSeed, tokens, Blocks(8, 4));
  auto other = client_->Store(breg_.id, BoardChunks(tokens, Blocks(8, 4)));
  ASSERT_EQ(other.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "an ungated store waited behind a gated one";
  auto stored = other.get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  for (const auto& o : *stored) EXPECT_EQ(o.result, ChunkResult::kStored);
  EXPECT_FALSE(board_->Released(save->signal, 1));
  // Then the gate opens and the first store completes.
  engine_->Fill(kSeed, gated_tokens, Blocks(0, 4));
  board_->Release(save->signal.slot, save->signal.sequence, 0);
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kStored);
}

TEST_F(GpuCompletion, AGateNeverOpenedIsReleasedAtTheDeadlineAndNothingIsStored) {
  GatedEngine gated;
  ConnectGatedEngine(std::chrono::milliseconds(300), 9, &gated);
  if (HasFatalFailure()) return;
  const auto start = Clock::now();
  auto save = gated.client->StoreOnStream(gated.reg.id, gated.chunks, *board_, nullptr);
  ASSERT_TRUE(save.ok());
  auto outcomes = save->outcomes.get();
  // Either the client's timeout or the daemon's per-chunk TimedOut.
  if (outcomes.ok()) {
    EXPECT_EQ((*outcomes)[0].result, ChunkResult::kFailed);
    EXPECT_EQ((*outcomes)[0].error.code(), StatusCode::kTimedOut);
  } else {
    EXPECT_EQ(outcomes.status().code(), StatusCode::kTimedOut);
  }
  ASSERT_TRUE(WaitReleased(save->signal, 1, std::chrono::milliseconds(3000)));
  EXPECT_EQ(board_->status(save->signal.slot + 1), uint32_t(StatusCode::kTimedOut));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  // The daemon released its own wait on the gate, and published nothing.
  const auto until = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < until &&
         !gated.client->Lookup(gated.reg.id, {gated.chunks[0].key}).get().ok()) {
  }
  auto hit = gated.client->Lookup(gated.reg.id, {gated.chunks[0].key}).get();
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(hit->hit_chunks, 0u);
  // Nor does the abandoned store's reservation linger: the same chunks store
  // ungated. (The daemon releases the slots before it drops the
  // reservation, so a store right then may still find them being stored.)
  const auto settle = Clock::now() + std::chrono::seconds(3);
  ChunkResult result = ChunkResult::kAlreadyPresent;
  while (result == ChunkResult::kAlreadyPresent && Clock::now() < settle) {
    auto again = gated.client->Store(gated.reg.id, gated.chunks).get();
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    result = (*again)[0].result;
  }
  EXPECT_EQ(result, ChunkResult::kStored);
}

// CPU seconds kvstashd used so far (/proc/<pid>/stat utime + stime).
double DaemonCpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // past "pid (comm) "
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

TEST_F(GpuCompletion, AGateNeverOpenedWithoutADeadlineCostsNoCpuAndEndsWithShutdown) {
  // As good as no deadline: the gate alone would keep the store waiting.
  GatedEngine gated;
  ConnectGatedEngine(std::chrono::hours(1), 12, &gated);
  if (HasFatalFailure()) return;
  auto save = gated.client->StoreOnStream(gated.reg.id, gated.chunks, *board_, nullptr);
  ASSERT_TRUE(save.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double before = DaemonCpuSeconds(daemon_->pid());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = DaemonCpuSeconds(daemon_->pid()) - before;
  EXPECT_LT(used, 0.1) << "kvstashd used " << used << " s of CPU in 1 s waiting for a closed gate";
  std::printf("a closed gate: kvstashd used %.3f s of CPU in 1 s\n", used);
  EXPECT_EQ(save->outcomes.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  // SIGTERM ends the wait at once: no 30 s drain, a clean exit.
  const auto stopping = Clock::now();
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_LT(Clock::now() - stopping, std::chrono::seconds(5));
  ASSERT_EQ(save->outcomes.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto outcomes = save->outcomes.get();
  if (outcomes.ok()) {
    EXPECT_EQ((*outcomes)[0].result, ChunkResult::kFailed);
    EXPECT_EQ((*outcomes)[0].error.code(), StatusCode::kUnavailable)
        << (*outcomes)[0].error.ToString();
  } else {
    EXPECT_EQ(outcomes.status().code(), StatusCode::kUnavailable) << outcomes.status().ToString();
  }
}

TEST_F(GpuCompletion, AStoreWaitingForItsGateCostsOtherClientsNoSpinning) {
  // Another client's pings, one at a time and 3 ms apart, so that each is
  // followed by whatever spinning the frontend does after it: one spin
  // window (50 us) without copies in flight, 20 with. A store waiting for
  // its gate must not count as one. frontend_spin_us is the frontend's CPU
  // time, so a loaded machine can lower it, never raise it.
  constexpr int kPings = 300;
  std::unique_ptr<Client> other = Connect();
  ASSERT_NE(other, nullptr);
  const auto spin_over_pings = [&](uint64_t* spun_us) {
    const uint64_t before = Counter("frontend_spin_us");
    ASSERT_NE(before, ~0ull) << "kvstashd reports no frontend_spin_us";
    for (int i = 0; i < kPings; ++i) {
      auto ping = other->Ping().get();
      ASSERT_TRUE(ping.ok()) << ping.status().ToString();
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    *spun_us = Counter("frontend_spin_us") - before;
  };
  uint64_t without_gate = 0;
  spin_over_pings(&without_gate);
  if (HasFatalFailure()) return;

  GatedEngine gated;
  ConnectGatedEngine(std::chrono::hours(1), 16, &gated);
  if (HasFatalFailure()) return;
  auto save = gated.client->StoreOnStream(gated.reg.id, gated.chunks, *board_, nullptr);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t with_gate = 0;
  spin_over_pings(&with_gate);
  if (HasFatalFailure()) return;
  std::printf("frontend spinning over %d pings: %llu us without a gate waiting, %llu us with\n",
              kPings, static_cast<unsigned long long>(without_gate),
              static_cast<unsigned long long>(with_gate));
  // 100 us a ping is two windows: 1 ms a ping (the gate taken for a copy in
  // flight) is far above, whatever the run without a gate spun.
  EXPECT_LE(with_gate, 3 * without_gate + kPings * 100)
      << "the frontend spun " << with_gate << " us over " << kPings
      << " pings of another client while a store waited for its gate, " << without_gate
      << " us without";

  // The gate is still watched: opened, the store is copied.
  EXPECT_EQ(save->outcomes.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  engine_->Fill(kSeed, gated.tokens, Blocks(0, 4));
  board_->Release(save->signal.slot, save->signal.sequence, 0);
  ASSERT_EQ(save->outcomes.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const auto& o : *outcomes) EXPECT_EQ(o.result, ChunkResult::kStored);
}

TEST_F(GpuCompletion, AGateNeverOpenedEndsWithItsConnection) {
  GatedEngine gated;
  ConnectGatedEngine(std::chrono::hours(1), 13, &gated);
  if (HasFatalFailure()) return;
  const uint64_t failed_before = Counter("store_chunks_failed");
  auto save = gated.client->StoreOnStream(gated.reg.id, gated.chunks, *board_, nullptr);
  ASSERT_TRUE(save.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  gated.client.reset();  // the engine's connection ends, its store with it
  auto outcomes = save->outcomes.get();
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kCancelled) << outcomes.status().ToString();
  // Well before the daemon would take the silent engine for dead.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until && Counter("store_chunks_failed") == failed_before) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Counter("store_chunks_failed"), failed_before + 1)
      << "the daemon still waits for the gate of a store whose engine is gone";
}

TEST_F(GpuCompletion, AGateNeverOpenedEndsWithItsRegistration) {
  GatedEngine gated;
  ConnectGatedEngine(std::chrono::hours(1), 15, &gated);
  if (HasFatalFailure()) return;
  auto save = gated.client->StoreOnStream(gated.reg.id, gated.chunks, *board_, nullptr);
  ASSERT_TRUE(save.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto unregistered = gated.client->UnregisterKV(gated.reg.id);
  ASSERT_EQ(unregistered.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_TRUE(unregistered.get().ok());
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  EXPECT_EQ((*outcomes)[0].result, ChunkResult::kFailed);
  EXPECT_EQ((*outcomes)[0].error.code(), StatusCode::kCancelled) << (*outcomes)[0].error.ToString();
}

TEST_F(GpuCompletion, AGateOnATruncatedBoardIsReportedAsADeviceError) {
  const auto tokens = PromptTokens(14, 64, 0);
  auto save = client_->StoreOnStream(breg_.id, BoardChunks(tokens, Blocks(0, 4)), *board_, nullptr);
  ASSERT_TRUE(save.ok()) << save.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The engine shrinks its board under the daemon (the test no longer
  // touches its own mapping of it).
  const int fd = shm_open(board_->shm().name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);
  ASSERT_EQ(save->outcomes.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto outcomes = save->outcomes.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  EXPECT_EQ((*outcomes)[0].result, ChunkResult::kFailed);
  EXPECT_EQ((*outcomes)[0].error.code(), StatusCode::kDeviceError)
      << (*outcomes)[0].error.ToString();
  EXPECT_EQ((*outcomes)[0].error.message().find("deadline"), std::string::npos)
      << "the store had no deadline to pass: " << (*outcomes)[0].error.message();
}

}  // namespace
}  // namespace kvstash::testing
