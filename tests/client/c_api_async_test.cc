// The whole C API through libkvstash.so against a real kvstashd (host
// backend): server info, readiness, describe/stats/clear, registration
// errors, and the asynchronous calls from many threads (completion through
// kvstash_call_wait and through the completion fd).
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "c_api_fixture.h"

namespace kvstash::testing {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// One layer, chunks of 32 tokens.
class CApiAsync : public CApiTest {
 protected:
  CApiAsync() : CApiTest(32, 1, "c-api-async-test") {}
};

TEST_F(CApiAsync, ServerInfoNamesTheDaemonAndNoRestart) {
  kvstash_server_info info{};
  ASSERT_EQ(kvstash_get_server_info(client_, &info), KVSTASH_OK);
  EXPECT_EQ(info.protocol_version, 2u);
  EXPECT_STREQ(info.backend, "host");
  EXPECT_EQ(info.chunk_tokens, 32u);
  EXPECT_GT(info.max_chunks_per_request, 0u);
  EXPECT_GT(std::strlen(info.server_version), 0u);
  const uint8_t zero[16] = {};
  EXPECT_NE(std::memcmp(info.boot_id, zero, 16), 0);
  EXPECT_EQ(info.restarts, 0u);
  EXPECT_EQ(kvstash_get_server_info(client_, nullptr), KVSTASH_INVALID_ARGUMENT);
}

TEST_F(CApiAsync, PoolReadinessReachesTheCapacity) {
  uint64_t ready = 0, capacity = 0;
  ASSERT_EQ(kvstash_pool_ready(client_, &ready, &capacity), KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(capacity, 32ull << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ready < capacity && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(kvstash_pool_ready(client_, &ready, nullptr), KVSTASH_OK);
  }
  EXPECT_EQ(ready, capacity);
  EXPECT_EQ(kvstash_pool_ready(client_, nullptr, nullptr), KVSTASH_OK);
}

TEST_F(CApiAsync, DescribeStatsAndClearAnswerJsonAndCounts) {
  const kvstash_registration reg = Register("described-model");
  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 7);
  std::vector<uint32_t> blocks = {0, 1, 2, 3};
  std::vector<kvstash_chunk> chunks(2);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), 64, blocks.data(), 4, chunks.data()),
            KVSTASH_OK);
  kvstash_chunk_outcome outcomes[2];
  ASSERT_EQ(kvstash_store(client_, reg.id, chunks.data(), 2, outcomes), KVSTASH_OK);

  char* json = nullptr;
  ASSERT_EQ(kvstash_describe(client_, &json), KVSTASH_OK) << kvstash_last_error(client_);
  ASSERT_NE(json, nullptr);
  EXPECT_NE(std::string(json).find("described-model"), std::string::npos) << json;
  EXPECT_TRUE(nlohmann::json::parse(json).is_object()) << json;
  kvstash_free(json);

  json = nullptr;
  ASSERT_EQ(kvstash_stats(client_, &json), KVSTASH_OK) << kvstash_last_error(client_);
  ASSERT_NE(json, nullptr);
  EXPECT_TRUE(nlohmann::json::parse(json).is_object()) << json;
  kvstash_free(json);
  kvstash_free(nullptr);

  uint64_t cleared = 0;
  ASSERT_EQ(kvstash_clear(client_, nullptr, nullptr, &cleared), KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(cleared, 2u);
  ASSERT_EQ(kvstash_clear(client_, "", nullptr, nullptr), KVSTASH_OK);
  std::vector<kvstash_key> keys(2);
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), 64, keys.data()), KVSTASH_OK);
  kvstash_lookup_result hit{};
  ASSERT_EQ(kvstash_lookup_ex(client_, reg.id, keys.data(), 2, 0, 0, &hit), KVSTASH_OK);
  EXPECT_EQ(hit.hit_chunks, 0u);
  EXPECT_EQ(kvstash_describe(client_, nullptr), KVSTASH_INVALID_ARGUMENT);
}

TEST_F(CApiAsync, RegistrationRejectsMixedOrMissingMemoryDescriptions) {
  kvstash_allocation allocation{};
  allocation.kind = KVSTASH_ALLOCATION_SHM;
  allocation.shm_name = memory_->name().c_str();
  allocation.size_bytes = memory_->size();
  const kvstash_layer layer{0, 0, Geometry()};
  const kvstash_cuda_layer cuda_layer{memory_->data(), Geometry()};
  kvstash_register_options options{};
  options.model = "m";
  options.allocations = &allocation;
  options.num_allocations = 1;
  options.layers = &layer;
  options.num_layers = 1;
  options.cuda_layers = &cuda_layer;
  options.num_cuda_layers = 1;
  kvstash_registration reg{};
  EXPECT_EQ(kvstash_register(client_, &options, &reg), KVSTASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvstash_last_error(client_)).find("one or the other"), std::string::npos);

  options.model = nullptr;
  EXPECT_EQ(kvstash_register(client_, &options, &reg), KVSTASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvstash_last_error(client_)).find("model"), std::string::npos);
}

TEST_F(CApiAsync, CudaLayersOfHostMemoryAreRefusedWithAReason) {
  // Host memory named as a CUDA layer: without CUDA in the build or a driver
  // this is Unavailable; with them, InvalidArgument (not GPU memory).
  const kvstash_cuda_layer cuda_layer{memory_->data(), Geometry()};
  kvstash_register_options options{};
  options.model = "cuda-model";
  options.cuda_layers = &cuda_layer;
  options.num_cuda_layers = 1;
  kvstash_registration reg{};
  const kvstash_status status = kvstash_register(client_, &options, &reg);
  EXPECT_TRUE(status == KVSTASH_UNAVAILABLE || status == KVSTASH_INVALID_ARGUMENT)
      << kvstash_status_name(status) << ": " << kvstash_last_error(client_);
  EXPECT_GT(std::strlen(kvstash_last_error(client_)), 10u);
}

TEST_F(CApiAsync, SubmittedCallsCompleteWithTheirResults) {
  const kvstash_registration reg = Register();
  std::vector<int32_t> tokens(96);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<uint32_t> source = {0, 1, 2, 3, 4, 5}, destination = {10, 11, 12, 13, 14, 15};
  std::vector<kvstash_chunk> chunks(3);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), 96, source.data(), 6, chunks.data()),
            KVSTASH_OK);
  kvstash_call* store = nullptr;
  ASSERT_EQ(kvstash_store_submit(client_, reg.id, chunks.data(), 3, 41, &store), KVSTASH_OK);
  // The arguments were copied: scribbling over them cannot change the store.
  std::memset(chunks.data(), 0xEE, sizeof(kvstash_chunk) * chunks.size());
  ASSERT_EQ(kvstash_call_wait(store, 10000), 1);
  EXPECT_EQ(kvstash_call_done(store), 1);
  EXPECT_EQ(kvstash_call_user_data(store), 41u);
  EXPECT_EQ(kvstash_call_status(store), KVSTASH_OK) << kvstash_call_error(store);
  EXPECT_STREQ(kvstash_call_error(store), "");
  kvstash_chunk_outcome outcomes[3];
  EXPECT_EQ(kvstash_call_outcomes(store, outcomes, 2), 3u);  // copies 2, says 3
  EXPECT_EQ(kvstash_call_outcomes(store, outcomes, 3), 3u);
  for (const auto& o : outcomes) EXPECT_EQ(o.result, KVSTASH_CHUNK_STORED);
  kvstash_call_free(store);

  std::vector<kvstash_key> keys(3);
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), 96, keys.data()), KVSTASH_OK);
  kvstash_call* lookup = nullptr;
  ASSERT_EQ(kvstash_lookup_ex_submit(client_, reg.id, keys.data(), 3, 0, 0, 42, &lookup),
            KVSTASH_OK);
  ASSERT_EQ(kvstash_call_wait(lookup, UINT32_MAX), 1);
  kvstash_lookup_result hit{};
  EXPECT_EQ(kvstash_call_lookup_result(lookup, &hit), KVSTASH_OK);
  EXPECT_EQ(hit.hit_chunks, 3u);
  EXPECT_NE(hit.lease_id, 0u);
  kvstash_call_free(lookup);

  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), 96, destination.data(), 6, chunks.data()),
            KVSTASH_OK);
  kvstash_call* retrieve = nullptr;
  ASSERT_EQ(kvstash_retrieve_submit(client_, reg.id, chunks.data(), 3, 0, 0, 43, &retrieve),
            KVSTASH_OK);
  ASSERT_EQ(kvstash_call_wait(retrieve, 10000), 1);
  EXPECT_EQ(kvstash_call_status(retrieve), KVSTASH_OK) << kvstash_call_error(retrieve);
  EXPECT_EQ(kvstash_call_outcomes(retrieve, outcomes, 3), 3u);
  for (const auto& o : outcomes) EXPECT_EQ(o.result, KVSTASH_CHUNK_RETRIEVED);
  for (int kv = 0; kv < 2; ++kv) {
    const uint8_t* base = memory_->data() + kv * kBlocks * kBlockBytes;
    EXPECT_EQ(std::memcmp(base, base + 10 * kBlockBytes, 6 * kBlockBytes), 0) << "kv " << kv;
  }
  kvstash_call_free(retrieve);

  kvstash_call* release = nullptr;
  ASSERT_EQ(kvstash_release_submit(client_, hit.lease_id, 44, &release), KVSTASH_OK);
  ASSERT_EQ(kvstash_call_wait(release, 10000), 1);
  kvstash_lookup_result released{};
  EXPECT_EQ(kvstash_call_lookup_result(release, &released), KVSTASH_OK)
      << kvstash_call_error(release);
  EXPECT_EQ(released.hit_chunks, 3u);
  kvstash_call_free(release);

  // An error comes back through the call, named.
  kvstash_call* missing = nullptr;
  ASSERT_EQ(kvstash_release_submit(client_, 987654321, 45, &missing), KVSTASH_OK);
  ASSERT_EQ(kvstash_call_wait(missing, 10000), 1);
  EXPECT_EQ(kvstash_call_status(missing), KVSTASH_NOT_FOUND);
  EXPECT_NE(std::string(kvstash_call_error(missing)).find("NotFound"), std::string::npos);
  kvstash_call_free(missing);
  // Drained: everything was freed before being taken.
  kvstash_call* taken[4];
  EXPECT_EQ(kvstash_take_completed(client_, taken, 4), 0u);
  EXPECT_FALSE(Readable(kvstash_completion_fd(client_), 0));
}

TEST_F(CApiAsync, TakeCompletedReturnsEachCallOnceAndNeverAFreedOne) {
  const kvstash_registration reg = Register();
  const int fd = kvstash_completion_fd(client_);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(Readable(fd, 0));
  std::vector<kvstash_key> keys(4);
  for (size_t i = 0; i < keys.size(); ++i) std::memset(keys[i].bytes, int(i + 1), 32);
  constexpr int kCalls = 40;
  std::vector<kvstash_call*> calls(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(
        kvstash_lookup_ex_submit(client_, reg.id, keys.data(), 4, 0, 0, uint64_t(i), &calls[i]),
        KVSTASH_OK);
    if (i % 4 == 0) kvstash_call_free(calls[i]);  // freed in flight (or just done)
  }
  for (int i = 0; i < kCalls; ++i) {
    if (i % 4 != 0) {
      ASSERT_EQ(kvstash_call_wait(calls[i], 10000), 1);
    }
  }
  for (int i = 1; i < kCalls; i += 4) kvstash_call_free(calls[i]);  // freed done, not taken
  EXPECT_TRUE(Readable(fd, 0));
  std::set<uint64_t> seen;
  kvstash_call* batch[7];
  for (size_t n; (n = kvstash_take_completed(client_, batch, 7)) > 0;) {
    for (size_t j = 0; j < n; ++j) {
      EXPECT_TRUE(seen.insert(kvstash_call_user_data(batch[j])).second);
      EXPECT_EQ(kvstash_call_status(batch[j]), KVSTASH_OK);
      kvstash_call_free(batch[j]);
    }
  }
  EXPECT_FALSE(Readable(fd, 0));
  std::set<uint64_t> expected;
  for (int i = 0; i < kCalls; ++i) {
    if (i % 4 == 2 || i % 4 == 3) expected.insert(uint64_t(i));
  }
  EXPECT_EQ(seen, expected);
}

TEST_F(CApiAsync, ManyThreadsSubmitAndCollectThroughTheFdAndWait) {
  const kvstash_registration reg = Register();
  // Calls waited for on a second handle: every completed call of a handle
  // is takeable until freed, so each handle here uses one way.
  kvstash_options options{};
  options.socket = daemon_->socket().c_str();
  options.timeout_ms = 10000;
  kvstash_client* waiting_client = nullptr;
  ASSERT_EQ(kvstash_connect(&options, &waiting_client), KVSTASH_OK)
      << kvstash_last_error(waiting_client);
  const kvstash_registration waiting_reg = Register(kModel, waiting_client);
  constexpr int kThreads = 8, kPerThread = 200;
  std::atomic<int> submitted_to_fd{0};
  std::atomic<bool> submitting{true};
  std::set<uint64_t> collected;
  int duplicates = 0, failed = 0;
  // Collects the fd-completed calls the way an event loop would.
  std::thread collector([&] {
    const int fd = kvstash_completion_fd(client_);
    kvstash_call* batch[64];
    for (;;) {
      const bool more_coming = submitting.load() || int(collected.size()) < submitted_to_fd.load();
      if (!more_coming) break;
      if (!Readable(fd, 100)) continue;
      const size_t n = kvstash_take_completed(client_, batch, 64);
      for (size_t j = 0; j < n; ++j) {
        if (!collected.insert(kvstash_call_user_data(batch[j])).second) ++duplicates;
        if (kvstash_call_status(batch[j]) != KVSTASH_OK) ++failed;
        kvstash_call_free(batch[j]);
      }
    }
  });
  std::atomic<int> waited_ok{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int32_t> tokens(64);
      std::iota(tokens.begin(), tokens.end(), t * 1000);
      std::vector<kvstash_key> keys(2);
      kvstash_chunk_keys(&reg, tokens.data(), 64, keys.data());
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t tag = uint64_t(t) * kPerThread + i;
        kvstash_call* call = nullptr;
        if (i % 2 == 0) {  // completion through the fd
          submitted_to_fd.fetch_add(1);
          if (kvstash_lookup_ex_submit(client_, reg.id, keys.data(), 2, 0, 0, tag, &call) !=
              KVSTASH_OK) {
            submitted_to_fd.fetch_sub(1);
          }
        } else {  // completion through wait; freed without being taken
          if (kvstash_lookup_ex_submit(waiting_client, waiting_reg.id, keys.data(), 2, 0, 0, tag,
                                       &call) == KVSTASH_OK &&
              kvstash_call_wait(call, 10000) == 1 && kvstash_call_status(call) == KVSTASH_OK) {
            waited_ok.fetch_add(1);
          }
          kvstash_call_free(call);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  submitting = false;
  collector.join();
  kvstash_call* left[1];
  EXPECT_EQ(kvstash_take_completed(waiting_client, left, 1), 0u);  // all freed
  kvstash_close(waiting_client);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(submitted_to_fd.load(), kThreads * kPerThread / 2);
  EXPECT_EQ(int(collected.size()), kThreads * kPerThread / 2);
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(waited_ok.load(), kThreads * kPerThread / 2);
  for (uint64_t tag : collected) EXPECT_EQ(tag % 2, 0u) << "a waited-for call came out of the fd";
  std::printf("[ figures  ] %d async lookups from %d threads in %.3f s\n", kThreads * kPerThread,
              kThreads, seconds);
}

TEST_F(CApiAsync, CallsOutliveTheirClientAndEndCancelledOrDone) {
  const kvstash_registration reg = Register();
  std::vector<kvstash_key> keys(1);
  std::vector<kvstash_call*> calls(50);
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_EQ(kvstash_lookup_ex_submit(client_, reg.id, keys.data(), 1, 0, 0, i, &calls[i]),
              KVSTASH_OK);
  }
  kvstash_close(client_);
  client_ = nullptr;
  for (kvstash_call* call : calls) {
    EXPECT_EQ(kvstash_call_done(call), 1);
    const kvstash_status status = kvstash_call_status(call);
    EXPECT_TRUE(status == KVSTASH_OK || status == KVSTASH_CANCELLED) << kvstash_status_name(status);
    kvstash_call_free(call);
  }
}

TEST(CApiEndpoint, KvstashSocketAndAPlainPathReachTheDaemon) {
  auto daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  // A plain path, no ipc:// prefix.
  kvstash_options options{};
  options.socket = (*daemon)->socket_path().c_str();
  options.timeout_ms = 2000;
  kvstash_client* client = nullptr;
  EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  EXPECT_EQ(kvstash_ping(client, nullptr), KVSTASH_OK);
  kvstash_close(client);
  // No socket given: $KVSTASH_SOCKET (a plain path too).
  ::setenv("KVSTASH_SOCKET", (*daemon)->socket_path().c_str(), 1);
  options.socket = nullptr;
  client = nullptr;
  EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  kvstash_close(client);
  options.socket = "";
  client = nullptr;
  EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  kvstash_close(client);
  ::unsetenv("KVSTASH_SOCKET");
}

TEST_F(CApiAsync, BoardSignalsRetrieveAndGatesStoreThroughTheCApi) {
  kvstash_board* board = nullptr;
  ASSERT_EQ(kvstash_board_create(client_, 8, -1, &board), KVSTASH_OK)
      << kvstash_last_error(client_);
  kvstash_board* none = nullptr;
  EXPECT_EQ(kvstash_board_create(client_, 5000, -1, &none), KVSTASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvstash_last_error(client_)).find("4096"), std::string::npos);
  kvstash_allocation allocation{};
  allocation.kind = KVSTASH_ALLOCATION_SHM;
  allocation.shm_name = memory_->name().c_str();
  allocation.size_bytes = memory_->size();
  const kvstash_layer layer{0, 0, Geometry()};
  kvstash_register_options options{};
  options.model = "board-model";
  options.allocations = &allocation;
  options.num_allocations = 1;
  options.layers = &layer;
  options.num_layers = 1;
  options.board = board;
  kvstash_registration reg{};
  ASSERT_EQ(kvstash_register(client_, &options, &reg), KVSTASH_OK) << kvstash_last_error(client_);

  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 500);
  std::vector<uint32_t> source = {0, 1, 2, 3}, destination = {20, 21, 22, 23};
  std::vector<kvstash_chunk> chunks(2);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), 64, source.data(), 4, chunks.data()),
            KVSTASH_OK);
  kvstash_board_signal save{};
  kvstash_call* store = nullptr;
  ASSERT_EQ(
      kvstash_store_on_stream(client_, reg.id, chunks.data(), 2, board, nullptr, 1, &save, &store),
      KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(save.count, 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(kvstash_call_done(store), 0) << "the store ran before its gate";
  kvstash_board_release(board, save.slot, save.sequence, 0);  // the engine's work is done
  ASSERT_EQ(kvstash_call_wait(store, 10000), 1);
  EXPECT_EQ(kvstash_call_status(store), KVSTASH_OK) << kvstash_call_error(store);
  EXPECT_EQ(kvstash_board_released(board, &save, 1), 1);
  kvstash_call_free(store);

  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), 64, destination.data(), 4, chunks.data()),
            KVSTASH_OK);
  kvstash_board_signal load{};
  kvstash_call* retrieve = nullptr;
  ASSERT_EQ(kvstash_retrieve_on_stream(client_, reg.id, chunks.data(), 2, 0, 0, board, nullptr, 1,
                                       2, &load, &retrieve),
            KVSTASH_OK)
      << kvstash_last_error(client_);
  ASSERT_EQ(kvstash_call_wait(retrieve, 10000), 1);
  EXPECT_EQ(kvstash_call_status(retrieve), KVSTASH_OK) << kvstash_call_error(retrieve);
  EXPECT_EQ(kvstash_board_released(board, &load, 0), 1);
  EXPECT_EQ(kvstash_board_status(board, load.slot), 0u);
  const uint8_t* base = memory_->data();
  EXPECT_EQ(std::memcmp(base + 20 * kBlockBytes, base, 4 * kBlockBytes), 0);
  kvstash_call_free(retrieve);
  // A CPU-only board has no streams to wait on.
  EXPECT_EQ(kvstash_board_wait(client_, board, nullptr, &load, 0), KVSTASH_INVALID_ARGUMENT);
  // More slots than the board holds: refused before anything is sent.
  kvstash_call* refused = nullptr;
  EXPECT_EQ(kvstash_retrieve_on_stream(client_, reg.id, chunks.data(), 2, 0, 0, board, nullptr, 9,
                                       3, &load, &refused),
            KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(kvstash_unregister(client_, reg.id), KVSTASH_OK);
  kvstash_board_destroy(board);
}

}  // namespace
}  // namespace kvstash::testing
