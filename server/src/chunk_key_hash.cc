// A seeded multiply-xorshift over the key's four 64-bit words (splitmix64's
// constants).
#include "chunk_key_hash.h"

#include <cstring>

namespace kvstash::server {

size_t ChunkKeyHash::operator()(uint32_t scope, const ChunkKey& key) const {
  uint64_t h = seed_ ^ (uint64_t(scope) * 0x9E3779B97F4A7C15ull);
  for (size_t offset = 0; offset < key.size(); offset += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, key.data() + offset, sizeof(word));
    h = (h ^ word) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  h *= 0x94D049BB133111EBull;
  return size_t(h ^ (h >> 29));
}

}  // namespace kvstash::server
