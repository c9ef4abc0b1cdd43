// What an engine sees when kvstashd stops, dies, hangs or restarts, through
// the C API against a real kvstashd: it notices within about a second,
// pending calls fail with KVSTASH_UNAVAILABLE, and after a restart the same
// registration id works again (registered again by the library). Prints the
// measured times as "[ figures  ]" lines.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <thread>

#include "c_api_fixture.h"

namespace kvstash::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One layer, chunks of 32 tokens, registered before each test.
class DaemonRestart : public CApiTest {
 protected:
  DaemonRestart() : CApiTest(32, 1, "restart-test") {}
  void SetUp() override {
    CApiTest::SetUp();
    if (HasFatalFailure()) return;
    reg_ = Register("restart-model");
    ASSERT_NE(reg_.id, 0u);
  }

  // Pings until one fails; returns how long after `since` that was.
  double MsUntilPingFails(Clock::time_point since) {
    const auto give_up = since + std::chrono::seconds(15);
    while (Clock::now() < give_up) {
      const kvstash_status status = kvstash_ping(client_, nullptr);
      if (status != KVSTASH_OK) {
        EXPECT_EQ(status, KVSTASH_UNAVAILABLE) << kvstash_last_error(client_);
        return Ms(Clock::now() - since);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Ms(Clock::now() - since);
  }

  // An asynchronous lookup in flight.
  kvstash_call* PendingLookup() {
    kvstash_key key{};
    kvstash_call* call = nullptr;
    EXPECT_EQ(kvstash_lookup_ex_submit(client_, reg_.id, &key, 1, 0, 0, 1, &call), KVSTASH_OK);
    return call;
  }

  kvstash_registration reg_{};
};

TEST_F(DaemonRestart, SigtermIsNoticedAtOnce) {
  const auto start = Clock::now();
  daemon_->Signal(SIGTERM);
  const double ms = MsUntilPingFails(start);
  std::printf("[ figures  ] SIGTERM noticed after %.1f ms\n", ms);
  EXPECT_LT(ms, 1000.0);
  daemon_->Wait();
}

TEST_F(DaemonRestart, SigkillFailsAPendingCallWithinASecond) {
  daemon_->Signal(SIGSTOP);  // so that the call stays pending
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kvstash_call* call = PendingLookup();
  ASSERT_NE(call, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(kvstash_call_done(call), 0);
  const auto start = Clock::now();
  daemon_->Signal(SIGKILL);
  ASSERT_EQ(kvstash_call_wait(call, 5000), 1);
  const double ms = Ms(Clock::now() - start);
  EXPECT_EQ(kvstash_call_status(call), KVSTASH_UNAVAILABLE) << kvstash_call_error(call);
  kvstash_call_free(call);
  std::printf("[ figures  ] SIGKILL: the pending call failed after %.1f ms\n", ms);
  EXPECT_LT(ms, 1000.0);
  daemon_->Wait();
  // And new calls fail at once while nobody listens.
  const auto again = Clock::now();
  EXPECT_EQ(kvstash_ping(client_, nullptr), KVSTASH_UNAVAILABLE);
  EXPECT_LT(Ms(Clock::now() - again), 200.0);
}

TEST_F(DaemonRestart, AHungDaemonIsNoticedThroughHeartbeats) {
  kvstash_call* call = nullptr;
  const auto start = Clock::now();
  daemon_->Signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  call = PendingLookup();
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(kvstash_call_wait(call, 5000), 1);
  const double ms = Ms(Clock::now() - start);
  EXPECT_EQ(kvstash_call_status(call), KVSTASH_UNAVAILABLE) << kvstash_call_error(call);
  kvstash_call_free(call);
  std::printf("[ figures  ] stopped (SIGSTOP) daemon noticed after %.1f ms\n", ms);
  EXPECT_LT(ms, 2000.0);
  daemon_->Signal(SIGKILL);
  daemon_->Signal(SIGCONT);
  daemon_->Wait();
}

TEST_F(DaemonRestart, TheSameRegistrationServesAgainAfterARestart) {
  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 5);
  std::vector<uint32_t> source = {0, 1, 2, 3}, destination = {8, 9, 10, 11};
  kvstash_chunk chunks[2];
  ASSERT_EQ(kvstash_prompt_chunks(&reg_, tokens.data(), 64, source.data(), 4, chunks), KVSTASH_OK);
  kvstash_chunk_outcome outcomes[2];
  ASSERT_EQ(kvstash_store(client_, reg_.id, chunks, 2, outcomes), KVSTASH_OK)
      << kvstash_last_error(client_);
  kvstash_key keys[2];
  ASSERT_EQ(kvstash_chunk_keys(&reg_, tokens.data(), 64, keys), KVSTASH_OK);
  kvstash_server_info before{};
  ASSERT_EQ(kvstash_get_server_info(client_, &before), KVSTASH_OK);

  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  const auto restart = Clock::now();
  ASSERT_TRUE(daemon_->Restart().ok());
  const auto answering = Clock::now();
  // The engine keeps its registration id; once the library registered it
  // again, lookups answer, and the chunks stored before are gone.
  kvstash_lookup_result hit{};
  kvstash_status status = KVSTASH_UNAVAILABLE;
  while (Clock::now() - restart < std::chrono::seconds(10)) {
    status = kvstash_lookup_ex(client_, reg_.id, keys, 2, 0, 0, &hit);
    if (status == KVSTASH_OK) break;
    ASSERT_EQ(status, KVSTASH_UNAVAILABLE) << kvstash_last_error(client_);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto serving = Clock::now();
  ASSERT_EQ(status, KVSTASH_OK) << kvstash_last_error(client_);
  EXPECT_EQ(hit.hit_chunks, 0u);
  std::printf(
      "[ figures  ] restart: engine serving %.1f ms after kvstashd was started again, "
      "%.1f ms after it answered\n",
      Ms(serving - restart), Ms(serving - answering));

  kvstash_server_info after{};
  ASSERT_EQ(kvstash_get_server_info(client_, &after), KVSTASH_OK);
  EXPECT_EQ(after.restarts, 1u);
  EXPECT_NE(std::memcmp(before.boot_id, after.boot_id, 16), 0);

  // Store and retrieve through the same id: the bytes round-trip.
  ASSERT_EQ(kvstash_store(client_, reg_.id, chunks, 2, outcomes), KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(outcomes[0].result, KVSTASH_CHUNK_STORED);
  ASSERT_EQ(kvstash_prompt_chunks(&reg_, tokens.data(), 64, destination.data(), 4, chunks),
            KVSTASH_OK);
  ASSERT_EQ(kvstash_retrieve(client_, reg_.id, chunks, 2, 0, 0, outcomes), KVSTASH_OK)
      << kvstash_last_error(client_);
  EXPECT_EQ(outcomes[1].result, KVSTASH_CHUNK_RETRIEVED);
  for (int kv = 0; kv < 2; ++kv) {
    const uint8_t* base = memory_->data() + kv * kBlocks * kBlockBytes;
    EXPECT_EQ(std::memcmp(base, base + 8 * kBlockBytes, 4 * kBlockBytes), 0) << "kv " << kv;
  }
  EXPECT_EQ(kvstash_unregister(client_, reg_.id), KVSTASH_OK) << kvstash_last_error(client_);
}

}  // namespace
}  // namespace kvstash::testing
