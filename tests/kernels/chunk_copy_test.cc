// The CPU twins against a naive reference written straight from docs/protocol.md's
// address formula, byte by byte, on every engine layout of layouts.h: random
// payloads, poisoned outputs, whole buffers compared.
#include "kvstash/kernels/chunk_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bytes.h"
#include "kvstash/geometry_check.h"
#include "kvstash/kernels/access_width.h"
#include "layouts.h"
#if KVSTASH_HAVE_CUDA
#include "kvstash/kernels/chunk_copy_cuda.h"  // PrepareGroup runs on the host alone
#endif

namespace kvstash::kernels::test {
namespace {

uint64_t PagedByte(const TestLayout& l, uint32_t layer, uint32_t block, uint32_t kv, uint32_t token,
                   uint32_t head, uint32_t byte) {
  const LayerGeometry& g = l.geometry;
  return l.layer_offset(layer) + block * g.block_stride + kv * g.kv_stride +
         token * g.token_stride + head * g.head_stride + byte;
}

uint64_t FlatByte(const TestLayout& l, uint32_t layer, uint32_t kv, uint32_t token, uint32_t head,
                  uint32_t byte) {
  const LayerGeometry& g = l.geometry;
  return kFlatOffsetBytes +
         ((((uint64_t{layer} * g.kv_count + kv) * l.chunk_tokens + token) * g.num_heads + head) *
              g.head_bytes +
          byte);
}

// Calls fn(layer, kv, token, head, byte) for every payload byte of tokens [begin, end).
template <typename Fn>
void ForEachByte(const TestLayout& l, uint32_t begin, uint32_t end, Fn fn) {
  const LayerGeometry& g = l.geometry;
  for (uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (uint32_t kv = 0; kv < g.kv_count; ++kv)
      for (uint32_t t = begin; t < end; ++t)
        for (uint32_t h = 0; h < g.num_heads; ++h)
          for (uint32_t b = 0; b < g.head_bytes; ++b) fn(layer, kv, t, h, b);
}

void ReferenceGather(const TestLayout& l, const std::vector<uint8_t>& arena, const ChunkSpec& c,
                     std::vector<uint8_t>& flat) {
  const uint32_t bt = l.geometry.block_tokens;
  ForEachByte(l, 0, c.num_tokens,
              [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h, uint32_t b) {
                flat[FlatByte(l, layer, kv, t, h, b)] =
                    arena[PagedByte(l, layer, c.block_ids[t / bt], kv, t % bt, h, b)];
              });
  ForEachByte(l, c.num_tokens, l.chunk_tokens,
              [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h, uint32_t b) {
                flat[FlatByte(l, layer, kv, t, h, b)] = 0;
              });
}

void ReferenceScatter(const TestLayout& l, const std::vector<uint8_t>& flat, const ChunkSpec& c,
                      std::vector<uint8_t>& arena) {
  const uint32_t bt = l.geometry.block_tokens;
  ForEachByte(l, c.skip_tokens, c.num_tokens,
              [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h, uint32_t b) {
                arena[PagedByte(l, layer, c.block_ids[t / bt], kv, t % bt, h, b)] =
                    flat[FlatByte(l, layer, kv, t, h, b)];
              });
}

std::vector<uint8_t*> Pointers(std::vector<std::vector<uint8_t>>& buffers) {
  std::vector<uint8_t*> out;
  for (auto& b : buffers) out.push_back(b.data());
  return out;
}

class ChunkCopyCpuTest : public ::testing::TestWithParam<TestLayout> {};

TEST_P(ChunkCopyCpuTest, LayoutIsAValidGeometry) {
  const TestLayout& l = GetParam();
  EXPECT_TRUE(ValidateGeometry(l.geometry).ok()) << ValidateGeometry(l.geometry).ToString();
}

TEST_P(ChunkCopyCpuTest, GatherMatchesReferenceAndZerosPartialTails) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> arena = RandomBytes(l.arena_bytes(), 1);
  const std::vector<uint8_t> arena_before = arena;
  const std::vector<uint8_t*> bases = LayerBases(l, arena.data());
  const std::vector<ChunkSpec> specs = MixedBatch(l, 2);
  std::vector<std::vector<uint8_t>> flats(specs.size(),
                                          std::vector<uint8_t>(l.flat_bytes(), kPoison));
  std::vector<std::vector<uint8_t>> expected = flats;
  for (size_t i = 0; i < specs.size(); ++i) ReferenceGather(l, arena, specs[i], expected[i]);

  const std::vector<ChunkCopy> chunks = MakeChunkCopies(specs, Pointers(flats));
  ASSERT_TRUE(GatherChunksCpu(MakeGroup(l, bases), chunks.data(), chunks.size()).ok());

  const uint64_t group_end = kFlatOffsetBytes + FlatGroupBytes(l.shape());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(SameBytes(flats[i], expected[i])) << "chunk " << i;
    // Exactly the group's bytes changed: payload is never poison, nor zero.
    EXPECT_EQ(CountNot(flats[i], kPoison), group_end - kFlatOffsetBytes) << "chunk " << i;
    EXPECT_EQ(CountNot(flats[i], 0, kFlatOffsetBytes, group_end),
              uint64_t{specs[i].num_tokens} * l.num_layers * l.geometry.kv_count *
                  l.geometry.num_heads * l.geometry.head_bytes)
        << "chunk " << i << ": the tail past num_tokens must be zeros";
  }
  EXPECT_TRUE(SameBytes(arena, arena_before)) << "gather wrote into the paged layers";
}

TEST_P(ChunkCopyCpuTest, ScatterWritesOnlyNamedBlocksFromSkipToNumTokens) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> arena(l.arena_bytes(), kPoison);
  const std::vector<uint8_t*> bases = LayerBases(l, arena.data());
  const std::vector<ChunkSpec> specs = MixedBatch(l, 3);
  std::vector<std::vector<uint8_t>> flats;
  for (size_t i = 0; i < specs.size(); ++i) flats.push_back(RandomBytes(l.flat_bytes(), 10 + i));
  std::vector<uint8_t> expected = arena;
  uint64_t written = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    ReferenceScatter(l, flats[i], specs[i], expected);
    written += ScatteredBytes(l, specs[i]);
  }

  const std::vector<ChunkCopy> chunks = MakeChunkCopies(specs, Pointers(flats));
  ASSERT_TRUE(ScatterChunksCpu(MakeGroup(l, bases), chunks.data(), chunks.size()).ok());

  EXPECT_TRUE(SameBytes(arena, expected));
  EXPECT_EQ(CountNot(arena, kPoison), written);
}

TEST_P(ChunkCopyCpuTest, GatherThenScatterIntoOtherBlocksRoundTrips) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> source = RandomBytes(l.arena_bytes(), 4);
  std::vector<uint8_t> target(l.arena_bytes(), kPoison);
  const std::vector<uint8_t*> source_bases = LayerBases(l, source.data());
  const std::vector<uint8_t*> target_bases = LayerBases(l, target.data());
  std::vector<ChunkSpec> from = MixedBatch(l, 5);
  std::vector<ChunkSpec> to = MixedBatch(l, 6);
  uint64_t written = 0;
  for (ChunkSpec& spec : to) {
    spec.skip_tokens = 0;
    written += ScatteredBytes(l, spec);
  }
  std::vector<std::vector<uint8_t>> flats(from.size(),
                                          std::vector<uint8_t>(l.flat_bytes(), kPoison));
  std::vector<std::vector<uint8_t>> again = flats;

  const auto gather = MakeChunkCopies(from, Pointers(flats));
  ASSERT_TRUE(GatherChunksCpu(MakeGroup(l, source_bases), gather.data(), gather.size()).ok());
  const auto scatter = MakeChunkCopies(to, Pointers(flats));
  ASSERT_TRUE(ScatterChunksCpu(MakeGroup(l, target_bases), scatter.data(), scatter.size()).ok());
  const auto regather = MakeChunkCopies(to, Pointers(again));
  ASSERT_TRUE(GatherChunksCpu(MakeGroup(l, target_bases), regather.data(), regather.size()).ok());

  for (size_t i = 0; i < flats.size(); ++i)
    EXPECT_TRUE(SameBytes(again[i], flats[i])) << "chunk " << i;
  EXPECT_EQ(CountNot(target, kPoison), written) << "bytes outside the named blocks changed";
}

TEST_P(ChunkCopyCpuTest, AccessWidthFollowsHeadBytesAndStrides) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> arena(l.arena_bytes() + 16);
  // Layer bases 16-aligned whatever the allocator returned.
  uint8_t* aligned = arena.data() + (16 - reinterpret_cast<uintptr_t>(arena.data()) % 16) % 16;
  const std::vector<uint8_t*> bases = LayerBases(l, aligned);
  alignas(16) uint8_t flat[16];
  const ChunkCopy chunk{flat, nullptr, 0, 0, 0};
  EXPECT_EQ(AccessWidthBytes(MakeGroup(l, bases), &chunk, 1), l.access_width);
}

// The host backend's task: one layer of a group prepared once, copied
// layer by layer, writes what the whole group's copy writes.
TEST_P(ChunkCopyCpuTest, PreparedGroupCopiedLayerByLayerMatchesReference) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> source = RandomBytes(l.arena_bytes(), 11);
  std::vector<uint8_t> target(l.arena_bytes(), kPoison);
  const std::vector<uint8_t*> source_bases = LayerBases(l, source.data());
  const std::vector<uint8_t*> target_bases = LayerBases(l, target.data());
  const std::vector<ChunkSpec> specs = MixedBatch(l, 12);
  std::vector<std::vector<uint8_t>> flats(specs.size(),
                                          std::vector<uint8_t>(l.flat_bytes(), kPoison));
  std::vector<std::vector<uint8_t>> expected_flats = flats;
  std::vector<uint8_t> expected_target = target;
  for (size_t i = 0; i < specs.size(); ++i) {
    ReferenceGather(l, source, specs[i], expected_flats[i]);
    ReferenceScatter(l, expected_flats[i], specs[i], expected_target);
  }

  Result<PreparedCpuGroup> from = PrepareGroupCpu(MakeGroup(l, source_bases));
  Result<PreparedCpuGroup> to = PrepareGroupCpu(MakeGroup(l, target_bases));
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  ASSERT_TRUE(to.ok()) << to.status().ToString();
  const std::vector<ChunkCopy> chunks = MakeChunkCopies(specs, Pointers(flats));
  for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
    for (const ChunkCopy& chunk : chunks) {
      ASSERT_TRUE(GatherChunksCpu(from->Layers(layer, 1), &chunk, 1).ok()) << "layer " << layer;
    }
  }
  for (uint32_t layer = l.num_layers; layer-- > 0;) {
    ASSERT_TRUE(ScatterChunksCpu(to->Layers(layer, 1), chunks.data(), chunks.size()).ok())
        << "layer " << layer;
  }

  for (size_t i = 0; i < flats.size(); ++i)
    EXPECT_TRUE(SameBytes(flats[i], expected_flats[i])) << "chunk " << i;
  EXPECT_TRUE(SameBytes(target, expected_target));
}

TEST_P(ChunkCopyCpuTest, PreparedGroupLayersAreTheGroupsLayers) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> arena(l.arena_bytes());
  const std::vector<uint8_t*> bases = LayerBases(l, arena.data());
  const GroupCopy group = MakeGroup(l, bases);
  Result<PreparedCpuGroup> prepared = PrepareGroupCpu(group);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  const GroupCopy& merged = prepared->group();
  EXPECT_EQ(merged.layer_bases, bases.data());
  EXPECT_EQ(merged.flat_offset_bytes, group.flat_offset_bytes);
  EXPECT_EQ(FlatGroupBytes(merged.shape), FlatGroupBytes(group.shape));
  EXPECT_EQ(LayerExtentBytes(merged.geometry), LayerExtentBytes(group.geometry));
  FlatGroupShape one = group.shape;
  one.num_layers = 1;
  for (uint32_t first = 0; first < l.num_layers; ++first) {
    const PreparedCpuGroup layers = prepared->Layers(first, l.num_layers - first);
    const GroupCopy& slice = layers.group();
    EXPECT_EQ(slice.layer_bases, bases.data() + first);
    EXPECT_EQ(slice.flat_offset_bytes, group.flat_offset_bytes + first * FlatGroupBytes(one));
    EXPECT_EQ(slice.shape.num_layers, l.num_layers - first);
    EXPECT_EQ(slice.shape.num_heads, merged.shape.num_heads);
    EXPECT_EQ(slice.geometry.head_bytes, merged.geometry.head_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ChunkCopyCpuTest, ::testing::ValuesIn(AllLayouts()),
                         [](const auto& info) { return info.param.name; });

// Argument checks, on the vLLM layout.
class ChunkCopyCpuArgsTest : public ::testing::Test {
 protected:
  ChunkCopyCpuArgsTest()
      : layout_(AllLayouts()[0]),
        arena_(RandomBytes(layout_.arena_bytes(), 7)),
        bases_(LayerBases(layout_, arena_.data())),
        specs_(MixedBatch(layout_, 8)),
        flats_(specs_.size(), std::vector<uint8_t>(layout_.flat_bytes(), kPoison)),
        chunks_(MakeChunkCopies(specs_, Pointers(flats_))) {}

  StatusCode Gather() { return GatherChunksCpu(group(), chunks_.data(), chunks_.size()).code(); }
  StatusCode Scatter() { return ScatterChunksCpu(group(), chunks_.data(), chunks_.size()).code(); }
  GroupCopy group() const { return MakeGroup(layout_, bases_); }
  // A rejected batch writes nothing, not even its valid chunks.
  bool Untouched() const {
    for (const auto& flat : flats_) {
      if (CountNot(flat, kPoison) != 0) return false;
    }
    return true;
  }

  TestLayout layout_;
  std::vector<uint8_t> arena_;
  std::vector<uint8_t*> bases_;
  std::vector<ChunkSpec> specs_;
  std::vector<std::vector<uint8_t>> flats_;
  std::vector<ChunkCopy> chunks_;
};

TEST_F(ChunkCopyCpuArgsTest, RejectsMoreTokensThanAChunkHolds) {
  chunks_[1].num_tokens = layout_.chunk_tokens + 1;
  EXPECT_EQ(Gather(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Scatter(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Untouched());
}

TEST_F(ChunkCopyCpuArgsTest, RejectsTooFewBlockIds) {
  chunks_[1].num_block_ids -= 1;
  EXPECT_EQ(Gather(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Scatter(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Untouched());
}

TEST_F(ChunkCopyCpuArgsTest, RejectsNullPointers) {
  chunks_[2].flat = nullptr;
  EXPECT_EQ(Gather(), StatusCode::kInvalidArgument);
  chunks_[2].flat = flats_[2].data();
  chunks_[2].block_ids = nullptr;
  EXPECT_EQ(Gather(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Untouched());
  EXPECT_EQ(GatherChunksCpu(group(), nullptr, 1).code(), StatusCode::kInvalidArgument);
  GroupCopy no_bases = group();
  no_bases.layer_bases = nullptr;
  EXPECT_EQ(GatherChunksCpu(no_bases, chunks_.data(), 1).code(), StatusCode::kInvalidArgument);
  bases_[2] = nullptr;
  EXPECT_EQ(Scatter(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkCopyCpuArgsTest, RejectsShapeThatDisagreesWithGeometry) {
  GroupCopy bad = group();
  bad.shape.head_bytes += 2;
  EXPECT_EQ(GatherChunksCpu(bad, chunks_.data(), chunks_.size()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(Untouched());
}

TEST_F(ChunkCopyCpuArgsTest, EmptyBatchIsOk) {
  EXPECT_TRUE(GatherChunksCpu(group(), nullptr, 0).ok());
  EXPECT_TRUE(ScatterChunksCpu(group(), nullptr, 0).ok());
}

TEST_F(ChunkCopyCpuArgsTest, ScatterWithSkipPastTheEndWritesNothing) {
  const std::vector<uint8_t> before = arena_;
  chunks_[0].skip_tokens = chunks_[0].num_tokens + 5;
  ASSERT_TRUE(ScatterChunksCpu(group(), chunks_.data(), 1).ok());
  EXPECT_TRUE(SameBytes(arena_, before));
}

TEST_F(ChunkCopyCpuArgsTest, PrepareGroupCpuRefusesWhatTheCopiesRefuse) {
  std::vector<GroupCopy> bad(5, group());
  bad[0].shape.head_bytes += 2;
  bad[1].geometry.block_tokens = 0;
  bad[1].shape.num_layers = 0;
  bad[2].shape.num_layers = 0;
  bad[3].layer_bases = nullptr;
  std::vector<uint8_t*> one_null = bases_;
  one_null[2] = nullptr;
  bad[4].layer_bases = one_null.data();
  for (size_t i = 0; i < bad.size(); ++i) {
    Result<PreparedCpuGroup> refused = PrepareGroupCpu(bad[i]);
    ASSERT_FALSE(refused.ok()) << "group " << i;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << "group " << i;
    // The one-call copies refuse it with the same words, writing nothing.
    EXPECT_EQ(GatherChunksCpu(bad[i], chunks_.data(), chunks_.size()).ToString(),
              refused.status().ToString());
    EXPECT_EQ(ScatterChunksCpu(bad[i], chunks_.data(), chunks_.size()).ToString(),
              refused.status().ToString());
  }
  EXPECT_NE(PrepareGroupCpu(bad[4]).status().message().find("layer 2"), std::string::npos)
      << PrepareGroupCpu(bad[4]).status().ToString();
  EXPECT_TRUE(Untouched());
}

TEST_F(ChunkCopyCpuArgsTest, PreparedCopiesRefuseABadChunkAndWriteNothing) {
  Result<PreparedCpuGroup> prepared = PrepareGroupCpu(group());
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  const std::vector<uint8_t> arena_before = arena_;
  chunks_[1].num_tokens = layout_.chunk_tokens + 1;
  const Status too_many = GatherChunksCpu(*prepared, chunks_.data(), chunks_.size());
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("chunk 1"), std::string::npos) << too_many.ToString();
  EXPECT_EQ(ScatterChunksCpu(*prepared, chunks_.data(), chunks_.size()).code(),
            StatusCode::kInvalidArgument);
  chunks_[1].num_tokens = specs_[1].num_tokens;
  chunks_[2].num_block_ids = 0;
  EXPECT_EQ(GatherChunksCpu(prepared->Layers(1, 1), chunks_.data(), chunks_.size()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterChunksCpu(prepared->Layers(1, 1), chunks_.data(), chunks_.size()).code(),
            StatusCode::kInvalidArgument);
  chunks_[2].num_block_ids = uint32_t(specs_[2].block_ids.size());
  chunks_[0].flat = nullptr;
  EXPECT_EQ(GatherChunksCpu(*prepared, chunks_.data(), chunks_.size()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherChunksCpu(*prepared, nullptr, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Untouched());
  EXPECT_TRUE(SameBytes(arena_, arena_before));
  EXPECT_TRUE(GatherChunksCpu(*prepared, nullptr, 0).ok());
}

TEST(AccessWidth, ShrinksToTheLeastAlignedPointerOrOffset) {
  const TestLayout l = AllLayouts()[0];
  alignas(16) static uint8_t arena[64];
  std::vector<uint8_t*> bases(l.num_layers, arena);
  ChunkCopy chunk{arena + 16, nullptr, 0, 0, 0};
  GroupCopy group = MakeGroup(l, bases);
  EXPECT_EQ(AccessWidthBytes(group, &chunk, 1), 16u);
  chunk.flat = arena + 2;
  EXPECT_EQ(AccessWidthBytes(group, &chunk, 1), 2u);
  chunk.flat = arena;
  bases[1] = arena + 4;
  EXPECT_EQ(AccessWidthBytes(group, &chunk, 1), 4u);
  bases[1] = arena;
  group.flat_offset_bytes = 8;
  EXPECT_EQ(AccessWidthBytes(group, &chunk, 1), 8u);
}

#if KVSTASH_HAVE_CUDA
// What a launch reads of a group is derived once, on the host; these need no
// device (the device view is only carried along, never read).
TEST_P(ChunkCopyCpuTest, PreparedGroupKeepsTheBytesAndTheWidthOfTheGroup) {
  const TestLayout& l = GetParam();
  std::vector<uint8_t> arena(l.arena_bytes());
  const std::vector<uint8_t*> bases = LayerBases(l, arena.data());
  const GroupCopy group = MakeGroup(l, bases);
  Result<PreparedGroup> prepared = PrepareGroup(DeviceGroupCopy{group, bases.data()});
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  const GroupCopy& merged = prepared->group;
  EXPECT_EQ(merged.layer_bases, nullptr);
  EXPECT_EQ(uint64_t{merged.shape.num_heads} * merged.shape.head_bytes,
            uint64_t{group.shape.num_heads} * group.shape.head_bytes);
  EXPECT_EQ(FlatGroupBytes(merged.shape), FlatGroupBytes(group.shape));
  EXPECT_GE(uint64_t{prepared->tile_tokens} * prepared->num_tiles, l.chunk_tokens);
  EXPECT_LT(uint64_t{prepared->tile_tokens} * (prepared->num_tiles - 1), l.chunk_tokens);
  // The width a launch picks from the prepared bits is AccessWidthBytes'.
  std::vector<uint8_t> flat(l.flat_bytes() + 16);
  for (uint8_t* at : {flat.data(), flat.data() + 1, flat.data() + 4}) {
    const uint64_t bits =
        prepared->alignment_bits | merged.flat_offset_bytes | reinterpret_cast<uintptr_t>(at);
    const ChunkCopy chunk{at, nullptr, 0, 0, 0};
    EXPECT_EQ(uint32_t(bits & (~bits + 1)), AccessWidthBytes(group, &chunk, 1));
  }
  // A layer range: its layers' flat bytes and device bases, the same facts.
  if (l.num_layers > 1) {
    const PreparedGroup tail = prepared->Layers(1, l.num_layers - 1);
    FlatGroupShape one = group.shape;
    one.num_layers = 1;
    EXPECT_EQ(tail.group.flat_offset_bytes, group.flat_offset_bytes + FlatGroupBytes(one));
    EXPECT_EQ(tail.group.shape.num_layers, l.num_layers - 1);
    EXPECT_EQ(tail.device_layer_bases, bases.data() + 1);
    EXPECT_EQ(tail.alignment_bits, prepared->alignment_bits);
    EXPECT_EQ(tail.tile_tokens, prepared->tile_tokens);
  }
}

TEST_F(ChunkCopyCpuArgsTest, PrepareGroupRefusesWhatTheCpuTwinsRefuse) {
  GroupCopy bad = group();
  bad.shape.head_bytes += 2;
  Result<PreparedGroup> refused = PrepareGroup(DeviceGroupCopy{bad, bases_.data()});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            GatherChunksCpu(bad, chunks_.data(), chunks_.size()).ToString());
  EXPECT_EQ(PrepareGroup(DeviceGroupCopy{group(), nullptr}).status().code(),
            StatusCode::kInvalidArgument);
  bases_[2] = nullptr;
  EXPECT_EQ(PrepareGroup(DeviceGroupCopy{group(), bases_.data()}).status().code(),
            StatusCode::kInvalidArgument);
}
#endif

}  // namespace
}  // namespace kvstash::kernels::test
