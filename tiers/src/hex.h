// Hex text back to bytes (ToHex's inverse, in vocab/keys.h). Internal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::tiers::internal {

// Reads 2*size lowercase or uppercase hex digits into out[0, size); false
// on any other character.
inline bool FromHex(const char* text, size_t digits, uint8_t* out) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (digits % 2 != 0) return false;
  for (size_t i = 0; i < digits / 2; ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace kvstash::tiers::internal
