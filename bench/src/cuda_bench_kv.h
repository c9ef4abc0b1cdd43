// The GPU KV memory of `kvstash bench --backend cuda`: one cudaMalloc per
// layer, as vLLM allocates its per-layer caches, laid out as flash-attn NHD
// [2, num_blocks, block_tokens, kv_heads, head_dim] and filled with a
// non-zero byte. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda_memory.h"

namespace kvstash::bench {

struct CudaBenchLayout {
  std::string name;
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  uint32_t block_tokens = 16;
  DType dtype = DType::kBF16;
  uint32_t kv_count = 2;  // 1: an MLA latent of head_dim bytes-per-element entries
};

// Llama-3-8B (32 MiB chunks of 256 tokens), Llama-3-70B on one TP-8 rank
// (10 MiB), DeepSeek-V3 MLA FP8 (656-byte entries, block 64: 10 MiB) and
// Qwen2.5-0.5B (3 MiB).
std::vector<CudaBenchLayout> CudaBenchLayouts();

class CudaBenchKv {
 public:
  static Result<CudaBenchKv> Create(const CudaBenchLayout& layout, uint32_t num_blocks);
  std::vector<CudaLayer> Layers() const;
  const LayerGeometry& geometry() const { return geometry_; }

 private:
  LayerGeometry geometry_;
  std::vector<cuda::DeviceBuffer> layers_;
};

}  // namespace kvstash::bench
