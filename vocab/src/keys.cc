// SHA-256 key chaining over little-endian int32 token ids.
#include "kvstash/keys.h"

#include <algorithm>

#include "sha256.h"

namespace kvstash {

ChunkKey NamespaceId(const KeyNamespace& ns) {
  internal::Sha256 h;
  h.Update(std::string_view("kvstash-namespace-v1"));
  h.Update(ns.model);
  h.Update(ns.tenant_salt);
  h.Update(ns.layout_fingerprint.data(), ns.layout_fingerprint.size());
  h.UpdateU32(ns.replicated_across_ranks ? 0 : ns.tp_rank);
  h.UpdateU32(ns.replicated_across_ranks ? 1 : ns.tp_size);
  return h.Finish();
}

std::vector<ChunkKey> ChainChunkKeys(const ChunkKey& seed, const int32_t* tokens, size_t num_tokens,
                                     uint32_t chunk_tokens) {
  std::vector<ChunkKey> keys;
  if (chunk_tokens == 0) return keys;
  keys.reserve((num_tokens + chunk_tokens - 1) / chunk_tokens);
  ChunkKey previous = seed;
  for (size_t begin = 0; begin < num_tokens; begin += chunk_tokens) {
    const size_t end = std::min(num_tokens, begin + chunk_tokens);
    internal::Sha256 h;
    h.Update(previous.data(), previous.size());
    for (size_t i = begin; i < end; ++i) h.UpdateU32(uint32_t(tokens[i]));
    previous = h.Finish();
    keys.push_back(previous);
  }
  return keys;
}

std::string ToHex(const uint8_t* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace kvstash
