// The in-process baseline: one gather (or scatter) kernel over every layer,
// beside one cudaMemcpyAsync.
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>

#include "baseline_copy.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::bench {

namespace {

// Grid: (blocks of the request, layers * kv_count). Each CUDA block copies one
// engine block of one (layer, kv): block_bytes contiguous bytes, 16 at a time.
template <bool kSave>
__global__ void BaselineKernel(const uint8_t* const* __restrict__ layers,  // [num_layers]
                               const uint32_t* __restrict__ block_ids,     // [num_blocks]
                               uint8_t* __restrict__ staging,  // [layers][kv][blocks][block_bytes]
                               uint32_t num_blocks, uint32_t kv_count, uint64_t kv_stride,
                               uint64_t block_stride, uint64_t block_bytes) {
  const uint32_t b = blockIdx.x;
  const uint32_t layer = blockIdx.y / kv_count;
  const uint32_t kv = blockIdx.y % kv_count;
  uint8_t* engine =
      const_cast<uint8_t*>(layers[layer]) + kv * kv_stride + block_ids[b] * block_stride;
  uint8_t* flat = staging + (uint64_t(blockIdx.y) * num_blocks + b) * block_bytes;
  const uint4* from = reinterpret_cast<const uint4*>(kSave ? engine : flat);
  uint4* to = reinterpret_cast<uint4*>(kSave ? flat : engine);
  for (uint64_t i = threadIdx.x; i < block_bytes / 16; i += blockDim.x) to[i] = from[i];
}

}  // namespace

Result<std::unique_ptr<BaselineCopy>> BaselineCopy::Create(
    const std::vector<const uint8_t*>& layers, const LayerGeometry& geometry, uint32_t max_blocks) {
  std::unique_ptr<BaselineCopy> owned(new BaselineCopy());
  BaselineCopy& copy = *owned;
  copy.geometry_ = geometry;
  copy.num_layers_ = uint32_t(layers.size());
  copy.max_blocks_ = max_blocks;
  const uint64_t block_bytes =
      uint64_t(geometry.block_tokens) * geometry.num_heads * geometry.head_bytes;
  if (block_bytes % 16 != 0 || geometry.block_stride % 16 != 0 || geometry.kv_stride % 16 != 0) {
    return Status::InvalidArgument("the baseline copies 16-byte aligned blocks only");
  }
  const uint64_t staging = uint64_t(max_blocks) * block_bytes * geometry.kv_count * layers.size();
  auto bases = cuda::DeviceBuffer::Allocate(layers.size() * sizeof(uint8_t*));
  auto ids = cuda::DeviceBuffer::Allocate(max_blocks * sizeof(uint32_t));
  auto buffer = cuda::DeviceBuffer::Allocate(staging);
  auto host = cuda::PinnedHostBuffer::Allocate(staging);
  auto ids_host = cuda::PinnedHostBuffer::Allocate(max_blocks * sizeof(uint32_t));
  auto stream = cuda::Stream::Create();
  auto done = cuda::Event::Create(cuda::Event::Wait::kSpin);
  for (const Status& s : {bases.status(), ids.status(), buffer.status(), host.status(),
                          ids_host.status(), stream.status(), done.status()}) {
    KVSTASH_RETURN_IF_ERROR(s);
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy(
      bases->data(), layers.data(), layers.size() * sizeof(uint8_t*), cudaMemcpyHostToDevice));
  copy.layer_bases_ = std::move(*bases);
  copy.block_ids_ = std::move(*ids);
  copy.staging_ = std::move(*buffer);
  copy.host_ = std::move(*host);
  copy.ids_host_ = std::move(*ids_host);
  copy.stream_ = std::move(*stream);
  copy.done_ = std::move(*done);
  return Result<std::unique_ptr<BaselineCopy>>(std::move(owned));
}

Result<double> BaselineCopy::Save(const std::vector<uint32_t>& blocks) { return Run(blocks, true); }
Result<double> BaselineCopy::Load(const std::vector<uint32_t>& blocks) {
  return Run(blocks, false);
}

Result<double> BaselineCopy::Run(const std::vector<uint32_t>& blocks, bool save) {
  if (blocks.empty() || blocks.size() > max_blocks_)
    return Status::InvalidArgument("baseline: bad block count");
  const auto start = std::chrono::steady_clock::now();
  const uint32_t n = uint32_t(blocks.size());
  const uint64_t block_bytes =
      uint64_t(geometry_.block_tokens) * geometry_.num_heads * geometry_.head_bytes;
  const uint64_t bytes = uint64_t(n) * block_bytes * geometry_.kv_count * num_layers_;
  cudaStream_t s = stream_.get();
  // The block table goes up with the request, as an engine's would.
  std::memcpy(ids_host_.host(), blocks.data(), n * sizeof(uint32_t));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block_ids_.data(), ids_host_.host(),
                                               n * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
  const dim3 grid(n, num_layers_ * geometry_.kv_count);
  const auto* layers = reinterpret_cast<const uint8_t* const*>(layer_bases_.data());
  const auto* ids = reinterpret_cast<const uint32_t*>(block_ids_.data());
  if (save) {
    BaselineKernel<true><<<grid, 256, 0, s>>>(layers, ids, staging_.data(), n, geometry_.kv_count,
                                              geometry_.kv_stride, geometry_.block_stride,
                                              block_bytes);
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_.host(), staging_.data(), bytes, cudaMemcpyDeviceToHost, s));
  } else {
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(staging_.data(), host_.host(), bytes, cudaMemcpyHostToDevice, s));
    BaselineKernel<false><<<grid, 256, 0, s>>>(layers, ids, staging_.data(), n, geometry_.kv_count,
                                               geometry_.kv_stride, geometry_.block_stride,
                                               block_bytes);
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_.get(), s));
  cudaError_t state;
  while ((state = cudaEventQuery(done_.get())) == cudaErrorNotReady) {
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(state);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kvstash::bench
