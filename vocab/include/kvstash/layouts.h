// Geometries of common engine layouts, for engines, benchmarks and tests that
// describe their KV memory with them.
#pragma once

#include <cstdint>

#include "kvstash/geometry.h"

namespace kvstash {

// vLLM flash-attn NHD, one layer: [2, num_blocks, block_tokens, num_heads,
// head_bytes], K and V each a contiguous half.
inline LayerGeometry VllmFlashNhdGeometry(uint32_t num_blocks, uint32_t block_tokens,
                                          uint32_t num_heads, uint32_t head_bytes, DType dtype) {
  LayerGeometry g;
  g.num_blocks = num_blocks;
  g.kv_count = 2;
  g.block_tokens = block_tokens;
  g.num_heads = num_heads;
  g.head_bytes = head_bytes;
  g.dtype = dtype;
  g.head_stride = head_bytes;
  g.token_stride = g.head_stride * num_heads;
  g.block_stride = g.token_stride * block_tokens;
  g.kv_stride = g.block_stride * num_blocks;
  return g;
}

}  // namespace kvstash
