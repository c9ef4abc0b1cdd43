// Chunk keys (docs/protocol.md "Scopes and keys"): key_0 = H(namespace, tokens[0:C]),
// key_i = H(key_{i-1}, tokens[iC:(i+1)C]), H = SHA-256 over little-endian
// int32 token ids. The namespace mixes model, tenant salt, layout fingerprint
// and KV rank, so chunks of different ones can never be confused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/chunk_layout.h"

namespace kvstash {

using ChunkKey = std::array<uint8_t, 32>;

struct KeyNamespace {
  std::string model;
  std::string tenant_salt;
  Fingerprint layout_fingerprint{};
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  // The engine stated that every rank holds the same KV (MLA): rank and size
  // do not enter the hash. Never derived from the geometry (kv_count 1 is
  // also an SGLang token pool's K or V, which differs per rank).
  bool replicated_across_ranks = false;
};

// The seed of a key chain.
ChunkKey NamespaceId(const KeyNamespace& ns);

// Keys of every chunk of tokens[0:n], the last one partial when n is not a
// multiple of chunk_tokens. Continuing a chain: pass the previous key as seed.
std::vector<ChunkKey> ChainChunkKeys(const ChunkKey& seed, const int32_t* tokens, size_t num_tokens,
                                     uint32_t chunk_tokens);

std::string ToHex(const uint8_t* bytes, size_t size);
inline std::string ToHex(const ChunkKey& key) { return ToHex(key.data(), key.size()); }

}  // namespace kvstash
