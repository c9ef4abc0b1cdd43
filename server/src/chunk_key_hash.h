// The chunk index's hash of (scope, key). Every byte of the key counts: keys
// come from engines, and not all of them are SHA-256 output (a 64-bit block
// hash padded with zeros, or a counter after a fixed prefix, would put every
// key into one bucket if only some bytes were hashed, and turn each lookup
// into a scan). The seed differs per daemon, so a client cannot aim keys at
// one bucket without knowing it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/keys.h"

namespace kvstash::server {

class ChunkKeyHash {
 public:
  explicit ChunkKeyHash(uint64_t seed = 0) : seed_(seed) {}
  size_t operator()(uint32_t scope, const ChunkKey& key) const;

 private:
  uint64_t seed_;
};

}  // namespace kvstash::server
