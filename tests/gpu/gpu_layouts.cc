// The GPU test layouts. Geometry helpers come from the kernel tests
// (tests/kernels/layouts.h), which check the same strides on the kernels.
#include "gpu_layouts.h"

#include "layouts.h"

namespace kvstash::testing {

namespace {

using kernels::test::BlockFirstNhd;
using kernels::test::Geometry;
using kernels::test::KvFirstHnd;
using kernels::test::KvFirstNhd;

// Room for two prompts of 200 tokens and some blocks no request names.
LayerGeometry Sized(uint32_t kv_count, uint32_t block_tokens, uint32_t num_heads,
                    uint32_t head_bytes, DType dtype) {
  LayerGeometry g = Geometry(kv_count, block_tokens, num_heads, head_bytes, kGpuChunkTokens, dtype);
  g.num_blocks = 2 * ((200 + block_tokens - 1) / block_tokens) + 6;
  return g;
}

enum class Placement { kPerLayer, kShared };

GpuLayout Uniform(std::string name, const LayerGeometry& g, uint32_t num_layers,
                  Placement placement) {
  GpuLayout layout;
  layout.name = std::move(name);
  layout.layers.assign(num_layers, g);
  for (uint32_t l = 0; l < num_layers; ++l) {
    layout.allocation_of_layer.push_back(placement == Placement::kPerLayer ? l : 0);
  }
  layout.num_allocations = placement == Placement::kPerLayer ? num_layers : 1;
  return layout;
}

}  // namespace

Result<GpuLayout> FindGpuLayout(const std::string& name) {
  // Llama-3-8B under vLLM: 32 layers, 8 KV heads x 128 bf16, block 16.
  const LayerGeometry llama = Sized(2, 16, 8, 256, DType::kBF16);
  if (name == "vllm_nhd") return Uniform(name, KvFirstNhd(llama), 32, Placement::kPerLayer);
  if (name == "vllm_hnd") return Uniform(name, KvFirstHnd(llama), 32, Placement::kShared);
  if (name == "flashinfer") return Uniform(name, BlockFirstNhd(llama), 32, Placement::kShared);
  // MLA latent: 512 + 64 rope bf16 elements per token.
  if (name == "mla_bf16") {
    return Uniform(name, KvFirstNhd(Sized(1, 16, 1, 1152, DType::kBF16)), 16, Placement::kShared);
  }
  // DeepSeek FP8 MLA entries: 656 bytes, block 64.
  if (name == "mla_fp8") {
    return Uniform(name, KvFirstNhd(Sized(1, 64, 1, 656, DType::kU8)), 16, Placement::kShared);
  }
  // int8 heads of 128 values and a 4-byte scale.
  if (name == "int8_132") {
    return Uniform(name, KvFirstNhd(Sized(2, 16, 8, 132, DType::kI8)), 8, Placement::kShared);
  }
  // Blocks padded past their packed size.
  if (name == "padded") {
    return Uniform(name, KvFirstNhd(Sized(2, 16, 4, 256, DType::kBF16), 512), 8,
                   Placement::kShared);
  }
  // A hybrid model: MHA layers with 8 KV heads and MLA layers, interleaved,
  // each kind in its own allocation: two groups.
  if (name == "hybrid") {
    GpuLayout layout;
    layout.name = name;
    layout.num_allocations = 2;
    const LayerGeometry mha = KvFirstNhd(llama);
    const LayerGeometry mla = KvFirstNhd(Sized(1, 16, 1, 1152, DType::kBF16));
    for (uint32_t l = 0; l < 12; ++l) {
      layout.layers.push_back(l % 3 == 2 ? mla : mha);
      layout.allocation_of_layer.push_back(l % 3 == 2 ? 1 : 0);
    }
    return layout;
  }
  return Status::NotFound("no GPU test layout \"" + name + "\"");
}

}  // namespace kvstash::testing
