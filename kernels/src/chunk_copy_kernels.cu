// CUDA gather/scatter kernels and their launchers. One CTA copies one tile of
// tokens of one (chunk, layer, kv) row, so a single launch covers every chunk
// of a batch and every layer of a group. Addresses come from the same
// PagedOffset/FlatOffset as the CPU twins; heads are merged when packed
// (merged_heads.h); the access width is a template parameter chosen by
// DispatchAccessWidth.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "access_width_dispatch.h"
#include "alignment_bits.h"
#include "chunk_copy_checks.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/kernels/access_width.h"
#include "kvstash/kernels/chunk_copy_cuda.h"
#include "merged_heads.h"

namespace kvstash::kernels {

namespace {

constexpr uint32_t kThreadsPerCta = 256;
// Bytes one CTA copies: enough to amortise its plan reads, few enough that a
// single Llama-8B chunk (64 rows of 512 KiB) makes 1024 CTAs.
constexpr uint64_t kTileBytes = 32 * 1024;
// Also bounds the block ids a tile spans (one per token at block_tokens 1).
constexpr uint32_t kMaxTileTokens = 256;

template <int kWidth>
struct VecOf;
template <>
struct VecOf<16> {
  using Type = uint4;
};
template <>
struct VecOf<8> {
  using Type = uint2;
};
template <>
struct VecOf<4> {
  using Type = uint32_t;
};
template <>
struct VecOf<2> {
  using Type = uint16_t;
};
template <>
struct VecOf<1> {
  using Type = uint8_t;
};

struct RowIndex {
  uint32_t chunk;
  uint32_t layer;
  uint32_t kv;
};

// The plan entries of one CTA's row, read once into shared memory: the plan
// may sit in mapped host memory, where every read crosses PCIe.
struct RowPlan {
  ChunkCopy chunk;
  uint8_t* layer_base;
  uint32_t block_ids[kMaxTileTokens];  // from the block of the tile's first copied token
};

__device__ __forceinline__ RowIndex RowOf(const FlatGroupShape& s, uint32_t row) {
  return {row / (s.num_layers * s.kv_count), row / s.kv_count % s.num_layers, row % s.kv_count};
}

// Every thread of the CTA must call the loaders (they synchronise).
__device__ __forceinline__ void LoadRowPlan(const RowIndex& r, uint8_t* const* layer_bases,
                                            const ChunkCopy* chunks, RowPlan& plan) {
  if (threadIdx.x == 0) {
    plan.chunk = chunks[r.chunk];
    plan.layer_base = layer_bases[r.layer];
  }
  __syncthreads();
}

// Block ids of the blocks holding tokens [begin, end), which may be empty.
__device__ __forceinline__ void LoadBlockIds(uint32_t block_tokens, uint32_t begin, uint32_t end,
                                             RowPlan& plan) {
  if (begin < end) {
    const uint32_t first = begin / block_tokens;
    const uint32_t count = (end - 1) / block_tokens - first + 1;
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
      plan.block_ids[i] = plan.chunk.block_ids[first + i];
    }
  }
  __syncthreads();
}

// Copies tokens [begin, end) of row `r` between its paged blocks and the flat
// chunk, kWidth bytes per access. Each thread issues kUnroll loads before its
// stores: the compiler may not reorder them itself (source and destination
// could alias), and one load in flight per thread leaves a single-chunk
// launch latency-bound.
template <int kWidth, bool kGather>
__device__ __forceinline__ void CopyTokens(const LayerGeometry& g, const FlatGroupShape& s,
                                           uint64_t flat_offset_bytes, const RowIndex& r,
                                           const RowPlan& plan, uint32_t begin, uint32_t end) {
  using Vec = typename VecOf<kWidth>::Type;
  constexpr uint32_t kUnroll = 4;
  const uint32_t vecs_per_head = s.head_bytes / kWidth;
  const uint32_t vecs_per_token = vecs_per_head * s.num_heads;
  const uint32_t first_block = begin / g.block_tokens;
  uint8_t* const base = plan.layer_base;
  uint8_t* const flat = plan.chunk.flat + flat_offset_bytes;
  const uint32_t num_vecs = (end - begin) * vecs_per_token;
  for (uint32_t first = threadIdx.x; first < num_vecs; first += kUnroll * blockDim.x) {
    Vec values[kUnroll];
    Vec* destinations[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint32_t i = first + u * blockDim.x;
      if (i >= num_vecs) break;
      const uint32_t token = begin + i / vecs_per_token;
      const uint32_t in_token = i % vecs_per_token;
      const uint32_t head = in_token / vecs_per_head;
      const uint32_t byte = in_token % vecs_per_head * kWidth;
      const uint32_t block = plan.block_ids[token / g.block_tokens - first_block];
      auto* paged = reinterpret_cast<Vec*>(
          base + PagedOffset(g, block, r.kv, token % g.block_tokens, head) + byte);
      auto* flat_vec =
          reinterpret_cast<Vec*>(flat + FlatOffset(s, r.layer, r.kv, token, head) + byte);
      values[u] = kGather ? *paged : *flat_vec;
      destinations[u] = kGather ? flat_vec : paged;
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      if (first + u * blockDim.x >= num_vecs) break;
      *destinations[u] = values[u];
    }
  }
}

template <int kWidth>
__device__ __forceinline__ void ZeroBytes(uint8_t* dst, uint64_t bytes) {
  using Vec = typename VecOf<kWidth>::Type;
  const Vec zero{};
  for (uint64_t i = threadIdx.x; i < bytes / kWidth; i += blockDim.x) {
    reinterpret_cast<Vec*>(dst)[i] = zero;
  }
}

// Tiles: (num_chunks * num_layers * kv_count rows) x (num_tiles =
// ceil(chunk_tokens / tile_tokens)), num_ctas in all, row-major; the grid
// walks them (one each unless the launch capped the grid). Block:
// (kThreadsPerCta). Tile (row, y) gathers tokens [y * tile_tokens,
// (y + 1) * tile_tokens) of row (chunk, layer, kv) and zeros those past the
// chunk's num_tokens.
template <int kWidth>
__global__ void __launch_bounds__(kThreadsPerCta) GatherChunksKernel(
    const LayerGeometry geometry,  // paged layout of every layer, heads merged
    const FlatGroupShape shape,    // [num_layers, kv_count, chunk_tokens, num_heads, head_bytes]
    const uint64_t flat_offset_bytes,          // group start inside each flat chunk
    uint8_t* const* __restrict__ layer_bases,  // [num_layers]
    const ChunkCopy* __restrict__ chunks,      // [num_chunks]
    const uint32_t tile_tokens, const uint32_t num_tiles, const uint64_t num_ctas) {
  __shared__ RowPlan plan;
  for (uint64_t cta = blockIdx.x; cta < num_ctas; cta += gridDim.x) {
    const RowIndex r = RowOf(shape, uint32_t(cta / num_tiles));
    LoadRowPlan(r, layer_bases, chunks, plan);
    const uint32_t begin = uint32_t(cta % num_tiles) * tile_tokens;
    const uint32_t end = min(begin + tile_tokens, shape.chunk_tokens);
    const uint32_t num_tokens = plan.chunk.num_tokens;
    const uint32_t copy_end = min(end, num_tokens);
    LoadBlockIds(geometry.block_tokens, begin, copy_end, plan);
    if (begin < copy_end) {
      CopyTokens<kWidth, true>(geometry, shape, flat_offset_bytes, r, plan, begin, copy_end);
    }
    const uint32_t zero_begin = max(begin, num_tokens);
    if (zero_begin < end) {
      const uint64_t token_bytes = uint64_t{shape.num_heads} * shape.head_bytes;
      ZeroBytes<kWidth>(
          plan.chunk.flat + flat_offset_bytes + FlatOffset(shape, r.layer, r.kv, zero_begin, 0),
          (end - zero_begin) * token_bytes);
    }
    __syncthreads();  // the next tile reloads the plan
  }
}

// Tiles and grid as for GatherChunksKernel. Tile (row, y) scatters the tokens of [y * tile_tokens,
// (y + 1) * tile_tokens) that lie in [skip_tokens, num_tokens) of its chunk.
template <int kWidth>
__global__ void __launch_bounds__(kThreadsPerCta) ScatterChunksKernel(
    const LayerGeometry geometry,  // paged layout of every layer, heads merged
    const FlatGroupShape shape,    // [num_layers, kv_count, chunk_tokens, num_heads, head_bytes]
    const uint64_t flat_offset_bytes,          // group start inside each flat chunk
    uint8_t* const* __restrict__ layer_bases,  // [num_layers]
    const ChunkCopy* __restrict__ chunks,      // [num_chunks]
    const uint32_t tile_tokens, const uint32_t num_tiles, const uint64_t num_ctas) {
  __shared__ RowPlan plan;
  for (uint64_t cta = blockIdx.x; cta < num_ctas; cta += gridDim.x) {
    const RowIndex r = RowOf(shape, uint32_t(cta / num_tiles));
    LoadRowPlan(r, layer_bases, chunks, plan);
    const uint32_t tile = uint32_t(cta % num_tiles);
    const uint32_t begin = max(tile * tile_tokens, plan.chunk.skip_tokens);
    const uint32_t end = min((tile + 1) * tile_tokens, plan.chunk.num_tokens);
    LoadBlockIds(geometry.block_tokens, begin, end, plan);
    if (begin < end) {
      CopyTokens<kWidth, false>(geometry, shape, flat_offset_bytes, r, plan, begin, end);
    }
    __syncthreads();  // the next tile reloads the plan
  }
}

enum class Direction { kGather, kScatter };

Status Launch(Direction direction, const PreparedGroup& group, const DeviceChunkBatch& batch,
              void* stream, uint32_t max_ctas) {
  const FlatGroupShape& s = group.group.shape;
  KVSTASH_RETURN_IF_ERROR(internal::CheckChunks(group.group, batch.chunks, batch.num_chunks));
  if (batch.num_chunks == 0) return Status::Ok();
  if (batch.device_chunks == nullptr) {
    return Status::InvalidArgument("device views of layer_bases and chunks must not be null");
  }
  const uint64_t rows = uint64_t{batch.num_chunks} * s.num_layers * s.kv_count;
  const uint64_t tiles = group.num_tiles;
  if (rows > INT32_MAX || tiles > 65535) {
    return Status::InvalidArgument(
        "batch of " + std::to_string(batch.num_chunks) + " chunks makes a " + std::to_string(rows) +
        " x " + std::to_string(tiles) + " grid, over CUDA's limits (2^31 - 1) x 65535: split it");
  }
  const uint64_t num_ctas = rows * tiles;
  // Past CUDA's 2^31 - 1 blocks, or past the cap, CTAs walk several tiles.
  const uint64_t ctas = std::min<uint64_t>(num_ctas, max_ctas == 0 ? INT32_MAX : max_ctas);
  const dim3 grid(static_cast<uint32_t>(ctas));
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  const uint32_t width = internal::AccessWidthOf(
      group.alignment_bits | group.group.flat_offset_bytes, batch.chunks, batch.num_chunks);
  return internal::DispatchAccessWidth(width, [&](auto width_tag) {
    constexpr int kWidth = decltype(width_tag)::value;
    if (direction == Direction::kGather) {
      GatherChunksKernel<kWidth><<<grid, kThreadsPerCta, 0, cuda_stream>>>(
          group.group.geometry, s, group.group.flat_offset_bytes, group.device_layer_bases,
          batch.device_chunks, group.tile_tokens, group.num_tiles, num_ctas);
      return cuda::CudaStatus(cudaGetLastError(), "GatherChunksKernel launch");
    }
    ScatterChunksKernel<kWidth><<<grid, kThreadsPerCta, 0, cuda_stream>>>(
        group.group.geometry, s, group.group.flat_offset_bytes, group.device_layer_bases,
        batch.device_chunks, group.tile_tokens, group.num_tiles, num_ctas);
    return cuda::CudaStatus(cudaGetLastError(), "ScatterChunksKernel launch");
  });
}

}  // namespace

Result<PreparedGroup> PrepareGroup(const DeviceGroupCopy& device_group) {
  KVSTASH_RETURN_IF_ERROR(internal::CheckGroup(device_group.group));
  if (device_group.device_layer_bases == nullptr) {
    return Status::InvalidArgument("device views of layer_bases and chunks must not be null");
  }
  const GroupCopy merged = internal::MergeContiguousHeads(device_group.group);
  const FlatGroupShape& s = merged.shape;
  const uint64_t token_bytes = uint64_t{s.num_heads} * s.head_bytes;
  // The kernels count a tile's accesses in 32 bits.
  if (token_bytes > UINT32_MAX) {
    return Status::InvalidArgument("token of " + std::to_string(token_bytes) +
                                   " bytes exceeds the kernels' 4 GiB limit");
  }
  const uint64_t tile_tokens = std::clamp<uint64_t>(
      kTileBytes / token_bytes, 1, std::min<uint64_t>(kMaxTileTokens, s.chunk_tokens));
  const uint64_t tiles = (s.chunk_tokens + tile_tokens - 1) / tile_tokens;
  PreparedGroup prepared;
  prepared.group = merged;
  prepared.group.layer_bases = nullptr;
  prepared.device_layer_bases = device_group.device_layer_bases;
  prepared.alignment_bits = internal::GroupAlignmentBits(merged);
  prepared.tile_tokens = static_cast<uint32_t>(tile_tokens);
  // At most chunk_tokens; a count past 65535 is refused per launch.
  prepared.num_tiles = static_cast<uint32_t>(tiles);
  return prepared;
}

Status GatherChunks(const PreparedGroup& group, const DeviceChunkBatch& batch, void* stream,
                    uint32_t max_ctas) {
  return Launch(Direction::kGather, group, batch, stream, max_ctas);
}

Status ScatterChunks(const PreparedGroup& group, const DeviceChunkBatch& batch, void* stream,
                     uint32_t max_ctas) {
  return Launch(Direction::kScatter, group, batch, stream, max_ctas);
}

}  // namespace kvstash::kernels
