// Geometry helpers and validation.
#include "kvstash/geometry.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "kvstash/geometry_check.h"

namespace kvstash {

namespace {
// No layer spans more than 2^62 bytes: offsets and their sums stay far from
// uint64_t's end.
constexpr uint64_t kMaxLayerExtentBytes = uint64_t{1} << 62;
}  // namespace

uint32_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kF8E5M2: return 1;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF32: return 4;
  }
  return 0;
}

bool SameGroupGeometry(const LayerGeometry& a, const LayerGeometry& b) {
  return a.num_blocks == b.num_blocks && a.kv_count == b.kv_count &&
         a.block_tokens == b.block_tokens && a.num_heads == b.num_heads &&
         a.head_bytes == b.head_bytes && a.block_stride == b.block_stride &&
         a.kv_stride == b.kv_stride && a.token_stride == b.token_stride &&
         a.head_stride == b.head_stride && a.dtype == b.dtype;
}

Status ValidateGeometry(const LayerGeometry& g) {
  if (g.num_blocks == 0 || g.kv_count == 0 || g.block_tokens == 0 || g.num_heads == 0 ||
      g.head_bytes == 0) {
    return Status::InvalidArgument(
        "geometry counts must be positive: num_blocks " + std::to_string(g.num_blocks) +
        ", kv_count " + std::to_string(g.kv_count) + ", block_tokens " +
        std::to_string(g.block_tokens) + ", num_heads " + std::to_string(g.num_heads) +
        ", head_bytes " + std::to_string(g.head_bytes));
  }
  if (g.kv_count > 2) {
    return Status::InvalidArgument("kv_count " + std::to_string(g.kv_count) +
                                   " must be 1 (MLA) or 2 (K and V)");
  }
  if (DTypeBytes(g.dtype) == 0) return Status::InvalidArgument("unknown dtype");
  if (g.head_bytes % DTypeBytes(g.dtype) != 0) {
    return Status::InvalidArgument("head_bytes " + std::to_string(g.head_bytes) +
                                   " is not a multiple of the dtype size " +
                                   std::to_string(DTypeBytes(g.dtype)));
  }
  // Entries must not overlap, whatever the nesting order (NHD, HND,
  // block-first): taken from the smallest stride up, each dimension's stride
  // must clear the span of everything nested inside it.
  struct Dim {
    const char* name;
    uint64_t count;
    uint64_t stride;
  };
  Dim dims[] = {{"head_stride", g.num_heads, g.head_stride},
                {"token_stride", g.block_tokens, g.token_stride},
                {"kv_stride", g.kv_count, g.kv_stride},
                {"block_stride", g.num_blocks, g.block_stride}};
  std::sort(std::begin(dims), std::end(dims),
            [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  // Exact integer arithmetic: a span past 2^64 bytes is refused as such
  // (converting a float that large to an integer is undefined, and printed
  // "must be at least 0 bytes").
  uint64_t span = g.head_bytes;
  for (const Dim& d : dims) {
    if (d.count <= 1) continue;
    if (d.stride < span) {
      return Status::InvalidArgument(std::string(d.name) + " " + std::to_string(d.stride) +
                                     " makes entries overlap: it must be at least " +
                                     std::to_string(span) + " bytes");
    }
    uint64_t next = 0;
    if (__builtin_mul_overflow(d.stride, d.count - 1, &next) ||
        __builtin_add_overflow(next, span, &next) || next > kMaxLayerExtentBytes) {
      return Status::InvalidArgument(std::string(d.name) + " " + std::to_string(d.stride) +
                                     " times " + std::to_string(d.count - 1) +
                                     " makes the layer span more than " +
                                     std::to_string(kMaxLayerExtentBytes) + " bytes");
    }
    span = next;
  }
  // Extents must not overflow: bound every term (each is below 2^32 * 2^64,
  // so long double, with its 64-bit mantissa, compares them without a cast
  // back to an integer).
  const long double extent = (long double)(g.num_blocks - 1) * g.block_stride +
                             (long double)(g.kv_count - 1) * g.kv_stride +
                             (long double)(g.block_tokens - 1) * g.token_stride +
                             (long double)(g.num_heads - 1) * g.head_stride + g.head_bytes;
  if (extent > (long double)kMaxLayerExtentBytes) {
    return Status::InvalidArgument("layer extent overflows: strides too large (the limit is " +
                                   std::to_string(kMaxLayerExtentBytes) + " bytes)");
  }
  return Status::Ok();
}

}  // namespace kvstash
