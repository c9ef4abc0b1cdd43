// The C API through libkvstash.so, with no daemon: connection failures,
// errors as codes plus per-handle text, keys and prompt chunks, and a ping
// answered by a fake ROUTER.
#include "kvstash/kvstash.h"

#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <string>

#include "fake_router.h"
#include "kvstash/client.h"

namespace kvstash::testing {
namespace {

kvstash_registration CRegistration(uint32_t chunk_tokens = 64, uint32_t block_tokens = 16) {
  kvstash_registration reg = KVSTASH_REGISTRATION_INIT;
  reg.id = 1;
  reg.chunk_tokens = chunk_tokens;
  reg.block_tokens = block_tokens;
  for (int i = 0; i < 32; ++i) reg.namespace_id[i] = uint8_t(i * 7);
  return reg;
}

TEST(CApi, FailedConnectStillGivesAHandleThatSaysWhy) {
  const std::string endpoint = UniqueIpcEndpoint();
  kvstash_options options{sizeof(kvstash_options), endpoint.c_str(), 200, "c-test"};
  kvstash_client* client = nullptr;
  EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_UNAVAILABLE);
  ASSERT_NE(client, nullptr);
  const std::string why = kvstash_last_error(client);
  EXPECT_NE(why.find("Unavailable"), std::string::npos) << why;
  EXPECT_NE(why.find(endpoint), std::string::npos) << why;
  uint64_t uptime = 0;
  EXPECT_EQ(kvstash_ping(client, &uptime), KVSTASH_UNAVAILABLE);
  EXPECT_NE(std::string(kvstash_last_error(client)).find("not connected"), std::string::npos);
  kvstash_close(client);
}

TEST(CApi, PingAndErrorsThroughAFakeDaemon) {
  FakeRouter router;
  const std::string endpoint = router.endpoint();
  kvstash_client* client = nullptr;
  auto connecting = std::async(std::launch::async, [&] {
    kvstash_options options{sizeof(kvstash_options), endpoint.c_str(), 3000, nullptr};
    return kvstash_connect(&options, &client);
  });
  ASSERT_TRUE(router.AnswerHello({9}));
  ASSERT_EQ(connecting.get(), KVSTASH_OK);
  EXPECT_STREQ(kvstash_last_error(client), "");

  uint64_t uptime = 0;
  auto ping = std::async(std::launch::async, [&] { return kvstash_ping(client, &uptime); });
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, PingReply(request->request_id(), 777));
  EXPECT_EQ(ping.get(), KVSTASH_OK);
  EXPECT_EQ(uptime, 777u);

  auto release = std::async(std::launch::async, [&] {
    const kvstash_status status = kvstash_release(client, 99);
    return std::make_pair(status, std::string(kvstash_last_error(client)));
  });
  request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, proto::ErrorMessage(request->request_id(),
                                             Status::NotFound("lease 99 is unknown or expired")));
  const auto [status, text] = release.get();
  EXPECT_EQ(status, KVSTASH_NOT_FOUND);
  EXPECT_EQ(text, "NotFound: lease 99 is unknown or expired");
  // The text belongs to the thread that made the call.
  EXPECT_STREQ(kvstash_last_error(client), "");
  kvstash_close(client);
}

TEST(CApi, StatusNamesComeFromTheSchema) {
  EXPECT_STREQ(kvstash_status_name(KVSTASH_OK), "Ok");
  EXPECT_STREQ(kvstash_status_name(KVSTASH_OUT_OF_RANGE), "OutOfRange");
  EXPECT_STREQ(kvstash_status_name(KVSTASH_CANCELLED), "Cancelled");
}

TEST(CApi, ChunkKeysMatchTheCppApi) {
  const kvstash_registration reg = CRegistration();
  std::vector<int32_t> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 5);
  ASSERT_EQ(kvstash_num_chunks(&reg, tokens.size()), 4u);
  std::vector<kvstash_key> keys(4);
  ASSERT_EQ(kvstash_chunk_keys(&reg, tokens.data(), tokens.size(), keys.data()), KVSTASH_OK);
  Registration cpp;
  cpp.chunk_tokens = 64;
  cpp.block_tokens = 16;
  std::copy(std::begin(reg.namespace_id), std::end(reg.namespace_id), cpp.namespace_id.begin());
  const auto expected = ChunkKeys(cpp, tokens.data(), tokens.size());
  ASSERT_EQ(expected.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::equal(expected[i].begin(), expected[i].end(), keys[i].bytes)) << i;
  }
}

TEST(CApi, PromptChunksPointIntoTheBlockTable) {
  const kvstash_registration reg = CRegistration(64, 16);
  std::vector<int32_t> tokens(150, 3);
  std::vector<uint32_t> table(10);
  std::iota(table.begin(), table.end(), 40);
  std::vector<kvstash_chunk> chunks(kvstash_num_chunks(&reg, tokens.size()));
  ASSERT_EQ(chunks.size(), 3u);
  ASSERT_EQ(kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), table.data(), table.size(),
                                  chunks.data()),
            KVSTASH_OK);
  EXPECT_EQ(chunks[0].num_tokens, 64u);
  EXPECT_EQ(chunks[0].block_ids, table.data());
  EXPECT_EQ(chunks[0].num_block_ids, 4u);
  EXPECT_EQ(chunks[2].num_tokens, 22u);
  EXPECT_EQ(chunks[2].block_ids, table.data() + 8);
  EXPECT_EQ(chunks[2].num_block_ids, 2u);
  EXPECT_EQ(
      kvstash_prompt_chunks(&reg, tokens.data(), tokens.size(), table.data(), 9, chunks.data()),
      KVSTASH_INVALID_ARGUMENT);
}

TEST(CApi, NullArgumentsAreInvalid) {
  EXPECT_EQ(kvstash_connect(nullptr, nullptr), KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_ping(nullptr, nullptr), KVSTASH_INVALID_ARGUMENT);
  EXPECT_EQ(kvstash_chunk_keys(nullptr, nullptr, 0, nullptr), KVSTASH_INVALID_ARGUMENT);
  kvstash_close(nullptr);
}

}  // namespace
}  // namespace kvstash::testing
