// A vocab LayerGeometry as the C API's kvstash_geometry, so that C API tests
// describe their layouts with the same helpers as everything else
// (kvstash/layouts.h).
#pragma once

#include "kvstash/geometry.h"
#include "kvstash/kvstash.h"

namespace kvstash::testing {

inline kvstash_geometry ToCGeometry(const LayerGeometry& g) {
  kvstash_geometry c{};
  c.num_blocks = g.num_blocks;
  c.kv_count = g.kv_count;
  c.block_tokens = g.block_tokens;
  c.num_heads = g.num_heads;
  c.head_bytes = g.head_bytes;
  c.block_stride = g.block_stride;
  c.kv_stride = g.kv_stride;
  c.token_stride = g.token_stride;
  c.head_stride = g.head_stride;
  c.dtype = uint8_t(g.dtype);
  return c;
}

}  // namespace kvstash::testing
