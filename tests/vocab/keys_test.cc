// Key chaining and namespaces.
#include "kvstash/keys.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvstash {
namespace {

std::vector<int32_t> Tokens(size_t n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(Keys, ChainIncludesPartialLastChunk) {
  const ChunkKey seed = NamespaceId(KeyNamespace{"llama", "", {}, 0, 1, false});
  const auto tokens = Tokens(600);
  const auto keys = ChainChunkKeys(seed, tokens.data(), tokens.size(), 256);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(keys[1], keys[2]);
}

TEST(Keys, SharedPrefixSharesKeysUntilTheyDiverge) {
  const ChunkKey seed = NamespaceId(KeyNamespace{"llama", "", {}, 0, 1, false});
  auto a = Tokens(768);
  auto b = a;
  b[600] = -1;  // differs in the third chunk
  const auto ka = ChainChunkKeys(seed, a.data(), a.size(), 256);
  const auto kb = ChainChunkKeys(seed, b.data(), b.size(), 256);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_EQ(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);
  // A change early changes every later key: the chain carries the prefix.
  b = a;
  b[3] = 7;
  const auto kc = ChainChunkKeys(seed, b.data(), b.size(), 256);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(ka[i], kc[i]);
}

TEST(Keys, ChainContinuesFromAPreviousKey) {
  const ChunkKey seed = NamespaceId(KeyNamespace{"m", "", {}, 0, 1, false});
  const auto tokens = Tokens(512);
  const auto whole = ChainChunkKeys(seed, tokens.data(), 512, 256);
  const auto tail = ChainChunkKeys(whole[0], tokens.data() + 256, 256, 256);
  EXPECT_EQ(tail[0], whole[1]);
}

TEST(Keys, MatchesSha256OfSeedAndLittleEndianTokens) {
  // SHA-256 of 32 zero bytes followed by int32 LE 1: fixed by docs/protocol.md.
  ChunkKey zero{};
  const int32_t token = 1;
  const auto key = ChainChunkKeys(zero, &token, 1, 256);
  EXPECT_EQ(ToHex(key[0]), "71c99cc3bc21757feed5b712744ebb0f770d5c41d99189f9457495747bf11050")
      << "if this fails, the key format changed: every stored chunk would be orphaned";
}

TEST(Keys, NamespaceSeparatesModelsTenantsLayoutsAndRanks) {
  KeyNamespace base{"llama", "", {}, 0, 2, false};
  const ChunkKey id = NamespaceId(base);
  KeyNamespace other = base;
  other.model = "mistral";
  EXPECT_NE(NamespaceId(other), id);
  other = base;
  other.tenant_salt = "tenant-a";
  EXPECT_NE(NamespaceId(other), id);
  other = base;
  other.layout_fingerprint[0] = 1;
  EXPECT_NE(NamespaceId(other), id);
  other = base;
  other.tp_rank = 1;
  EXPECT_NE(NamespaceId(other), id);
  // MLA: the same on every rank.
  KeyNamespace mla0{"deepseek", "", {}, 0, 8, true};
  KeyNamespace mla5{"deepseek", "", {}, 5, 8, true};
  EXPECT_EQ(NamespaceId(mla0), NamespaceId(mla5));
}

}  // namespace
}  // namespace kvstash
