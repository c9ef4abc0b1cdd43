// splitmix64 streams seeded by the row identity.
#include "kvstash/bench/bench_pattern.h"

#include <cstring>

namespace kvstash::bench {

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void PatternRow(const RowId& row, uint8_t* out, size_t bytes) {
  uint64_t state = Mix(row.layer);
  state = Mix(state ^ (uint64_t(row.kv) << 32 | row.head));
  state = Mix(state ^ uint64_t(uint32_t(row.token)));
  state = Mix(state ^ (uint64_t(row.position) << 1));
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    state += 0x9e3779b97f4a7c15ull;
    const uint64_t word = Mix(state);
    std::memcpy(out + i, &word, 8);
  }
  if (i < bytes) {
    const uint64_t word = Mix(state + 0x9e3779b97f4a7c15ull);
    std::memcpy(out + i, &word, bytes - i);
  }
}

}  // namespace kvstash::bench
