// The geometry of one engine layer, described by byte strides rather than a
// layout enum (docs/protocol.md "Geometry"), and the address arithmetic shared by the
// CUDA kernels and their CPU twins.
#pragma once

#include <cstdint>

#include "kvstash/host_device.h"
#include "kvstash/wire_enums.h"

namespace kvstash {

// address(b, k, t, h) = base + b*block_stride + k*kv_stride + t*token_stride
//                            + h*head_stride; head_bytes contiguous bytes there.
struct LayerGeometry {
  uint32_t num_blocks = 0;
  uint32_t kv_count = 0;  // 2 = K and V, 1 = MLA latent
  uint32_t block_tokens = 0;
  uint32_t num_heads = 0;
  uint32_t head_bytes = 0;
  uint64_t block_stride = 0;
  uint64_t kv_stride = 0;
  uint64_t token_stride = 0;
  uint64_t head_stride = 0;
  DType dtype = DType::kU8;
};

KVSTASH_HOST_DEVICE uint64_t PagedOffset(const LayerGeometry& g, uint64_t block, uint64_t kv,
                                         uint64_t token, uint64_t head) {
  return block * g.block_stride + kv * g.kv_stride + token * g.token_stride + head * g.head_stride;
}

// Bytes from the layer base to one past the last payload byte.
KVSTASH_HOST_DEVICE uint64_t LayerExtentBytes(const LayerGeometry& g) {
  return PagedOffset(g, g.num_blocks - 1, g.kv_count - 1, g.block_tokens - 1, g.num_heads - 1) +
         g.head_bytes;
}

// Bytes of one element of a dtype (FP8 types are 1).
uint32_t DTypeBytes(DType dtype);

// Equal in everything but the base: such layers share one group.
bool SameGroupGeometry(const LayerGeometry& a, const LayerGeometry& b);

}  // namespace kvstash
