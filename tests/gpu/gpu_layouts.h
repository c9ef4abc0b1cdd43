// Engine-sized KV layouts for the GPU end-to-end tests, by name, with the
// strides each engine really uses, and where their layers live: one
// cudaMalloc per layer (as vLLM's per-layer tensors), one for all layers, or
// one per group (hybrid models).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash::testing {

// Tokens per chunk of the daemons these tests start (--chunk-tokens).
inline constexpr uint32_t kGpuChunkTokens = 64;

struct GpuLayout {
  std::string name;
  std::vector<LayerGeometry> layers;
  std::vector<uint32_t> allocation_of_layer;  // [layers.size()]
  uint32_t num_allocations = 1;
  uint32_t block_tokens() const { return layers.front().block_tokens; }
  uint32_t num_blocks() const { return layers.front().num_blocks; }
};

// vllm_nhd, vllm_hnd, flashinfer, mla_bf16, mla_fp8, int8_132, hybrid, padded.
Result<GpuLayout> FindGpuLayout(const std::string& name);

}  // namespace kvstash::testing
