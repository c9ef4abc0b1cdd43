// Bench KV memory on the GPU.
#include "cuda_bench_kv.h"

#include <cuda_runtime_api.h>

#include "kvstash/cuda/cuda_status.h"
#include "kvstash/layouts.h"

namespace kvstash::bench {

std::vector<CudaBenchLayout> CudaBenchLayouts() {
  return {{"llama-3-8b", 32, 8, 128, 16, DType::kBF16},
          {"llama-3-70b-tp8", 80, 1, 128, 16, DType::kBF16},
          {"deepseek-v3-mla-fp8", 61, 1, 656, 64, DType::kU8, 1},
          {"qwen2.5-0.5b", 24, 2, 64, 16, DType::kBF16}};
}

Result<CudaBenchKv> CudaBenchKv::Create(const CudaBenchLayout& layout, uint32_t num_blocks) {
  CudaBenchKv kv;
  kv.geometry_ = VllmFlashNhdGeometry(num_blocks, layout.block_tokens, layout.kv_heads,
                                      layout.head_dim * DTypeBytes(layout.dtype), layout.dtype);
  if (layout.kv_count == 1) {  // MLA: [num_blocks, block_tokens, entry]
    kv.geometry_.kv_count = 1;
    kv.geometry_.kv_stride = 0;
  }
  const LayerGeometry& g = kv.geometry_;
  for (uint32_t l = 0; l < layout.layers; ++l) {
    Result<cuda::DeviceBuffer> layer = cuda::DeviceBuffer::Allocate(LayerExtentBytes(g));
    if (!layer.ok()) return layer.status();
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemset(layer->data(), 0x5A + l, layer->size()));
    kv.layers_.push_back(std::move(*layer));
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // written before any Store reads it
  return kv;
}

std::vector<CudaLayer> CudaBenchKv::Layers() const {
  std::vector<CudaLayer> layers;
  for (const cuda::DeviceBuffer& layer : layers_) layers.push_back({layer.data(), geometry_});
  return layers;
}

}  // namespace kvstash::bench
