// Chunk keys and prompt chunks computed through the client API.
#include <gtest/gtest.h>

#include <numeric>

#include "kvstash/client.h"

namespace kvstash {
namespace {

RegisteredKv MakeRegistration(uint32_t chunk_tokens = 64, uint32_t block_tokens = 16) {
  RegisteredKv reg;
  reg.id = 3;
  reg.chunk_tokens = chunk_tokens;
  reg.block_tokens = block_tokens;
  KeyNamespace ns;
  ns.model = "llama";
  reg.namespace_id = NamespaceId(ns);
  return reg;
}

std::vector<int32_t> Tokens(size_t n, int32_t first = 1) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(ChunkKeys, ChainFromTheRegistrationsNamespace) {
  const RegisteredKv reg = MakeRegistration();
  const auto tokens = Tokens(150);
  const auto keys = ChunkKeys(reg, tokens.data(), tokens.size());
  ASSERT_EQ(keys.size(), 3u);  // 64 + 64 + 22
  EXPECT_EQ(keys, ChainChunkKeys(reg.namespace_id, tokens.data(), tokens.size(), 64));
  // A prompt sharing the first chunk shares its key, and only that one.
  auto other = tokens;
  other[100] = -1;
  const auto other_keys = ChunkKeys(reg, other.data(), other.size());
  EXPECT_EQ(other_keys[0], keys[0]);
  EXPECT_NE(other_keys[1], keys[1]);
  // Another namespace never shares keys.
  RegisteredKv elsewhere = reg;
  elsewhere.namespace_id[0] ^= 1;
  EXPECT_NE(ChunkKeys(elsewhere, tokens.data(), tokens.size())[0], keys[0]);
}

TEST(ChunkKeys, PartialLastChunkDiffersFromTheFullOne) {
  const RegisteredKv reg = MakeRegistration();
  const auto tokens = Tokens(128);
  const auto full = ChunkKeys(reg, tokens.data(), 128);
  const auto partial = ChunkKeys(reg, tokens.data(), 100);
  ASSERT_EQ(partial.size(), 2u);
  EXPECT_EQ(partial[0], full[0]);
  EXPECT_NE(partial[1], full[1]);
}

TEST(PromptChunks, SplitsTheBlockTableByChunk) {
  const RegisteredKv reg = MakeRegistration(64, 16);
  const auto tokens = Tokens(150);
  std::vector<uint32_t> table(10);
  std::iota(table.begin(), table.end(), 100);
  auto chunks = PromptChunks(reg, tokens.data(), tokens.size(), table.data(), table.size());
  ASSERT_TRUE(chunks.ok()) << chunks.status().ToString();
  ASSERT_EQ(chunks->size(), 3u);
  EXPECT_EQ((*chunks)[0].num_tokens, 64u);
  EXPECT_EQ((*chunks)[0].block_ids, (std::vector<uint32_t>{100, 101, 102, 103}));
  EXPECT_EQ((*chunks)[1].block_ids, (std::vector<uint32_t>{104, 105, 106, 107}));
  EXPECT_EQ((*chunks)[2].num_tokens, 22u);
  EXPECT_EQ((*chunks)[2].block_ids, (std::vector<uint32_t>{108, 109}));  // ceil(22 / 16)
  const auto keys = ChunkKeys(reg, tokens.data(), tokens.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ((*chunks)[i].key, keys[i]);
}

TEST(PromptChunks, RejectsAShortBlockTable) {
  const RegisteredKv reg = MakeRegistration(64, 16);
  const auto tokens = Tokens(150);
  std::vector<uint32_t> table(9);  // needs 10
  auto chunks = PromptChunks(reg, tokens.data(), tokens.size(), table.data(), table.size());
  ASSERT_FALSE(chunks.ok());
  EXPECT_EQ(chunks.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(chunks.status().message().find("need 10 blocks"), std::string::npos)
      << chunks.status().message();
}

}  // namespace
}  // namespace kvstash
