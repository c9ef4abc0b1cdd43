// The synthetic engine's KV bytes: a deterministic function of where a row
// lives and which token it belongs to, so a retrieve can be checked byte for
// byte without keeping a copy of what was stored.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::bench {

// Identifies one head row: head_bytes contiguous bytes in the engine layout.
struct RowId {
  uint32_t layer = 0;
  uint32_t kv = 0;        // 0 = K, 1 = V
  int32_t token = 0;      // token id
  uint32_t position = 0;  // position in the prompt
  uint32_t head = 0;
};

// Writes the row's bytes (any function of all five fields and the byte index).
void PatternRow(const RowId& row, uint8_t* out, size_t bytes);

// The byte an unwritten row holds after poisoning.
inline constexpr uint8_t kPoisonByte = 0xA5;

}  // namespace kvstash::bench
