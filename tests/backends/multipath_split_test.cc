// How a multi-path copy is cut into pieces: large chunks by layers, small
// ones whole, every path the same bytes of each batch, every byte of every
// chunk in exactly one piece (layer-wise steps, hybrid groups, odd sizes),
// the batches a copy enqueues them in, and the least loaded usable path for
// each piece.
#include "multipath_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "fake_groups.h"
#include "kvstash/chunk_layout.h"
#include "kvstash/layouts.h"

namespace kvstash::backends {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint32_t kChunkTokens = 256;

// Llama-3-8B: 32 layers of 8 KV heads x 128 bf16, 1 MiB a layer, 32 MiB a chunk.
FakeGroups Llama8b() {
  return MakeFakeGroups(
      std::vector<LayerGeometry>(32, VllmFlashNhdGeometry(64, 16, 8, 256, DType::kBF16)),
      kChunkTokens);
}
// Qwen2.5-0.5B: 24 layers of 2 KV heads x 64 bf16, 128 KiB a layer, 3 MiB a chunk.
FakeGroups Qwen05b() {
  return MakeFakeGroups(
      std::vector<LayerGeometry>(24, VllmFlashNhdGeometry(64, 16, 2, 128, DType::kBF16)),
      kChunkTokens);
}
// A hybrid model: 9 layers of 1 MiB and 9 of 128 KiB (another head count),
// interleaved as the engine lists them: two groups.
FakeGroups Hybrid() {
  std::vector<LayerGeometry> layers;
  for (int i = 0; i < 18; ++i) {
    layers.push_back(i % 2 == 0 ? VllmFlashNhdGeometry(64, 16, 8, 256, DType::kBF16)
                                : VllmFlashNhdGeometry(64, 16, 2, 128, DType::kBF16));
  }
  return MakeFakeGroups(layers, kChunkTokens);
}

uint64_t GroupBytes(const FakeGroups& g) {
  uint64_t bytes = 0;
  for (const GroupAddresses& a : g.groups) bytes += FlatGroupBytes(a.group.shape);
  return bytes;
}

// The signal of a layer-wise retrieve of one range per layer of a
// one-group layout.
CopySignal LayerWise(uint32_t layers) {
  CopySignal signal;
  for (uint32_t k = 0; k < layers; ++k) {
    signal.ranges.push_back({{k, 1}});
    signal.range_slots.push_back(k);
  }
  return signal;
}

std::vector<uint64_t> BytesPerPath(const std::vector<CopyPiece>& pieces, size_t paths) {
  const std::vector<size_t> path = AssignPieces(pieces, paths);
  std::vector<uint64_t> bytes(paths, 0);
  for (size_t i = 0; i < pieces.size(); ++i) bytes[path[i]] += pieces[i].bytes;
  return bytes;
}

// Every piece is a rectangle inside one batch whose windows are its slices'
// bytes; each chunk's windows over every piece tile the bytes of every
// step's layers once; pieces come step by step, batch by batch.
void ExpectExactCover(const FakeGroups& g, const std::vector<CopyStep>& steps,
                      const std::vector<CopyPiece>& pieces, size_t chunks, size_t per_batch,
                      const std::string& what) {
  SCOPED_TRACE(what);
  const uint64_t chunk_bytes = g.layout.chunk_bytes();
  std::map<size_t, std::vector<std::pair<uint64_t, uint64_t>>> seen;  // per chunk
  for (size_t i = 0; i < pieces.size(); ++i) {
    const CopyPiece& p = pieces[i];
    ASSERT_LT(p.begin, p.end) << "piece " << i;
    ASSERT_LE(p.end, chunks) << "piece " << i;
    EXPECT_EQ(p.batch, p.begin / per_batch) << "piece " << i;
    EXPECT_EQ(p.batch, (p.end - 1) / per_batch) << "piece " << i << " spans two batches";
    if (i > 0) {
      const CopyPiece& q = pieces[i - 1];
      EXPECT_TRUE(q.step < p.step || (q.step == p.step && q.batch <= p.batch))
          << "piece " << i << " out of order";
    }
    ASSERT_EQ(p.slices.size(), g.groups.size());
    uint64_t width = 0;
    if (p.windows.empty()) {
      EXPECT_EQ(p.slices, steps[p.step].slices) << "a whole-chunk piece is its whole step";
      EXPECT_TRUE(steps[p.step].windows.empty());
      width = chunk_bytes;
    } else {
      EXPECT_EQ(p.windows, FlatWindows(g.groups, p.slices)) << "piece " << i;
      for (const auto& [lo, hi] : p.windows) width += hi - lo;
    }
    EXPECT_EQ(p.bytes, (p.end - p.begin) * width) << "piece " << i;
    for (size_t g_index = 0; g_index < p.slices.size(); ++g_index) {
      const auto [first, count] = p.slices[g_index];
      const auto [step_first, step_count] = steps[p.step].slices[g_index];
      if (count == 0) continue;
      EXPECT_GE(first, step_first) << "piece " << i << " outside its step";
      EXPECT_LE(first + count, step_first + step_count) << "piece " << i << " outside its step";
    }
    const std::vector<std::pair<uint64_t, uint64_t>> windows =
        p.windows.empty() ? FlatWindows(g.groups, p.slices) : p.windows;
    for (size_t c = p.begin; c < p.end; ++c)
      seen[c].insert(seen[c].end(), windows.begin(), windows.end());
  }
  ASSERT_EQ(seen.size(), chunks) << "a chunk in no piece";
  for (auto& [chunk, windows] : seen) {
    std::sort(windows.begin(), windows.end());
    uint64_t covered = 0;
    for (size_t i = 0; i < windows.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(windows[i - 1].second, windows[i].first) << "chunk " << chunk;
      }
      covered += windows[i].second - windows[i].first;
    }
    EXPECT_EQ(covered, GroupBytes(g)) << "chunk " << chunk;
  }
}

// The batches list every piece once, in order, each under its own step and
// batch, with that batch's chunks, region and refill rule.
void ExpectBatchesCover(const std::vector<std::vector<PieceBatch>>& batches,
                        const std::vector<CopyPiece>& pieces, size_t steps, size_t chunks,
                        size_t per_batch, size_t regions, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(batches.size(), steps);
  const size_t count = (chunks + per_batch - 1) / per_batch;
  size_t next = 0;
  for (size_t s = 0; s < steps; ++s) {
    for (const PieceBatch& b : batches[s]) {
      EXPECT_EQ(b.step, s);
      EXPECT_EQ(b.first, next) << "step " << s << " batch " << b.batch << " skips pieces";
      ASSERT_GT(b.count, 0u);
      ASSERT_LE(b.first + b.count, pieces.size());
      EXPECT_EQ(b.begin, b.batch * per_batch);
      EXPECT_EQ(b.end, std::min(chunks, b.begin + per_batch));
      EXPECT_EQ(b.region, b.batch % regions);
      EXPECT_EQ(b.refill, count > regions && s * count + b.batch >= regions);
      EXPECT_EQ(b.last, b.batch + 1 == count);
      for (size_t i = b.first; i < b.first + b.count; ++i) {
        EXPECT_EQ(pieces[i].step, s) << "piece " << i;
        EXPECT_EQ(pieces[i].batch, b.batch) << "piece " << i;
        EXPECT_GE(pieces[i].begin, b.begin) << "piece " << i;
        EXPECT_LE(pieces[i].end, b.end) << "piece " << i;
      }
      next = b.first + b.count;
    }
  }
  EXPECT_EQ(next, pieces.size()) << "a piece in no batch";
}

// A copy's pieces (cut as a dma copy cuts them) and the batches it walks,
// checked to list every piece once.
struct Walk {
  std::vector<CopyPiece> pieces;
  std::vector<std::vector<PieceBatch>> batches;
};

Walk WalkOf(const FakeGroups& g, const std::vector<CopyStep>& steps, size_t chunks,
            size_t per_batch, size_t paths, uint64_t piece_bytes, size_t regions,
            const std::string& what) {
  Walk walk;
  walk.pieces =
      SplitCopy(g.groups, steps, g.layout.chunk_bytes(), chunks, per_batch, paths, piece_bytes);
  walk.batches = PieceBatches(walk.pieces, steps.size(), chunks, per_batch, regions);
  ExpectBatchesCover(walk.batches, walk.pieces, steps.size(), chunks, per_batch, regions, what);
  return walk;
}

// A step of `count` layers from `first` of a one-group layout (none: a
// step without layers), its slots `slots`.
CopyStep StepOf(const FakeGroups& g, uint32_t first, uint32_t count, std::vector<uint32_t> slots) {
  CopyStep step;
  step.slices = {{first, count}};
  step.windows = FlatWindows(g.groups, step.slices);
  step.slots = std::move(slots);
  return step;
}

TEST(MultipathSplit, ChunksPerBatchFollowTheChunkSize) {
  // Large chunks: one per batch until paths x piece_bytes exceed one.
  EXPECT_EQ(ChunksPerBatch(32 * kMiB, 2, 8 * kMiB, 64), 1u);
  EXPECT_EQ(ChunksPerBatch(32 * kMiB, 4, 8 * kMiB, 64), 1u);
  EXPECT_EQ(ChunksPerBatch(32 * kMiB, 8, 8 * kMiB, 64), 2u);
  EXPECT_EQ(ChunksPerBatch(10 * kMiB, 4, 8 * kMiB, 64), 3u);
  // Small chunks: whole, piece_bytes' worth to a piece, a piece per path.
  EXPECT_EQ(ChunksPerBatch(3 * kMiB, 4, 8 * kMiB, 64), 8u);
  EXPECT_EQ(ChunksPerBatch(3 * kMiB, 4, 8 * kMiB, 5), 5u) << "capped";
  EXPECT_EQ(ChunksPerBatch(3 * kMiB, 1, 8 * kMiB, 0), 1u);
  EXPECT_EQ(ChunksPerBatch(4096, 2, std::numeric_limits<uint64_t>::max(), 7), 7u);
}

TEST(MultipathSplit, ALargeChunkIsCutByLayersIntoEqualPiecesForEveryPath) {
  const FakeGroups g = Llama8b();
  ASSERT_EQ(g.layout.chunk_bytes(), 32 * kMiB);
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  for (const size_t paths : {2, 3, 4}) {
    const size_t per_batch = ChunksPerBatch(32 * kMiB, paths, 8 * kMiB, 4);
    ASSERT_EQ(per_batch, 1u);
    const std::vector<CopyPiece> pieces =
        SplitCopy(g.groups, steps, 32 * kMiB, 4, per_batch, paths, 8 * kMiB);
    ExpectExactCover(g, steps, pieces, 4, per_batch, std::to_string(paths) + " paths");
    // A multiple of the paths per chunk, none past 8 MiB by more than a
    // layer: two paths take 4 pieces of 8 layers, three 6 of 5-6, four 4 of 8.
    ASSERT_EQ(pieces.size() % (4 * paths), 0u);
    EXPECT_EQ(pieces.size(), paths == 3 ? 24u : 16u);
    for (const CopyPiece& p : pieces) {
      EXPECT_EQ(p.end - p.begin, 1u);
      EXPECT_LE(p.bytes, 8 * kMiB);
      EXPECT_GE(p.bytes, 5 * kMiB);
    }
    // Each piece to the least loaded path: no path more than one piece
    // ahead of another; exactly even where the layers divide.
    const std::vector<uint64_t> bytes = BytesPerPath(pieces, paths);
    const auto [least, most] = std::minmax_element(bytes.begin(), bytes.end());
    EXPECT_LE(*most - *least, paths == 3 ? 6 * kMiB : 0) << paths << " paths";
  }
  // Four paths: every path carries exactly a quarter of each chunk.
  const std::vector<CopyPiece> pieces = SplitCopy(g.groups, steps, 32 * kMiB, 4, 1, 4, 8 * kMiB);
  EXPECT_EQ(BytesPerPath(pieces, 4), std::vector<uint64_t>(4, 32 * kMiB));
}

TEST(MultipathSplit, AOneChunkRetrieveTakesEveryPath) {
  const FakeGroups g = Llama8b();
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const std::vector<CopyPiece> pieces = SplitCopy(g.groups, steps, 32 * kMiB, 1, 1, 4, 8 * kMiB);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(AssignPieces(pieces, 4), (std::vector<size_t>{0, 1, 2, 3}));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pieces[i].slices[0], (std::pair<uint32_t, uint32_t>(8 * i, 8)));
    EXPECT_EQ(pieces[i].windows.size(), 1u) << "one contiguous window: one copy";
  }
}

TEST(MultipathSplit, AStoreWithADoneSlotIsCutAsARetrieveOfTheSameChunks) {
  // A store's signal releases one done slot and names no layer ranges: one
  // step of every layer, no slot of its own, the same pieces as a retrieve.
  const FakeGroups g = Llama8b();
  CopySignal store;
  store.gate_slot = 0;
  store.done_slot = 1;
  const std::vector<CopyStep> steps = CopySteps(g.groups, &store);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].slots.empty());
  EXPECT_TRUE(steps[0].windows.empty());
  EXPECT_EQ(steps[0].slices, CopySteps(g.groups, nullptr)[0].slices);
  const std::vector<CopyPiece> pieces = SplitCopy(g.groups, steps, 32 * kMiB, 3, 1, 2, 8 * kMiB);
  ExpectExactCover(g, steps, pieces, 3, 1, "store");
  EXPECT_EQ(BytesPerPath(pieces, 2), std::vector<uint64_t>(2, 48 * kMiB));
  // The first batch's relay piece goes in hops that tile it once.
  const std::vector<RelayCopy> hops = RelayCopies(pieces[1], 32 * kMiB, true, 2 * kMiB);
  ASSERT_EQ(hops.size(), 4u);
  uint64_t packed = 0;
  for (const RelayCopy& c : hops) {
    EXPECT_EQ(c.packed, packed);
    EXPECT_EQ(c.lo, pieces[1].windows[0].first + packed);
    packed += c.width;
  }
  EXPECT_EQ(packed, pieces[1].bytes);
}

TEST(MultipathSplit, SmallChunksGoWholeSeveralToAPiece) {
  const FakeGroups g = Qwen05b();
  ASSERT_EQ(g.layout.chunk_bytes(), 3 * kMiB);
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const size_t per_batch = ChunksPerBatch(3 * kMiB, 4, 8 * kMiB, 21);
  ASSERT_EQ(per_batch, 8u);
  const std::vector<CopyPiece> pieces =
      SplitCopy(g.groups, steps, 3 * kMiB, 16, per_batch, 4, 8 * kMiB);
  ExpectExactCover(g, steps, pieces, 16, per_batch, "qwen");
  ASSERT_EQ(pieces.size(), 8u);
  for (const CopyPiece& p : pieces) {
    EXPECT_EQ(p.end - p.begin, 2u);
    EXPECT_TRUE(p.windows.empty()) << "whole chunks";
    EXPECT_EQ(p.bytes, 6 * kMiB);
  }
  EXPECT_EQ(BytesPerPath(pieces, 4), std::vector<uint64_t>(4, 12 * kMiB));
  // Fewer chunks than paths: their layers are cut instead.
  const std::vector<CopyPiece> two = SplitCopy(g.groups, steps, 3 * kMiB, 2, 8, 3, 8 * kMiB);
  ExpectExactCover(g, steps, two, 2, 8, "two chunks, three paths");
  ASSERT_EQ(two.size(), 3u);
  for (const CopyPiece& p : two) {
    EXPECT_EQ(p.end - p.begin, 2u);
    EXPECT_EQ(p.bytes, 2 * kMiB) << "8 layers of 128 KiB, two chunks";
  }
}

TEST(MultipathSplit, HybridGroupsAreCutByBytes) {
  const FakeGroups g = Hybrid();
  ASSERT_EQ(g.groups.size(), 2u);
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const uint64_t chunk_bytes = g.layout.chunk_bytes();
  const std::vector<CopyPiece> pieces =
      SplitCopy(g.groups, steps, chunk_bytes, 1, 1, 4, chunk_bytes);
  ExpectExactCover(g, steps, pieces, 1, 1, "hybrid");
  ASSERT_EQ(pieces.size(), 4u);
  const uint64_t largest_layer = kMiB;
  for (const CopyPiece& p : pieces) {
    EXPECT_LE(p.bytes, GroupBytes(g) / 4 + largest_layer);
    EXPECT_GE(p.bytes + largest_layer, GroupBytes(g) / 4);
  }
}

TEST(MultipathSplit, LargeLayersAfterManySmallOnesGetPiecesOfTheirOwn) {
  // Six layers of 1 KiB, then two of 1 MiB: four pieces cannot be equal;
  // each large layer should be a piece, not share one with small ones
  // while another piece holds only small ones.
  std::vector<LayerGeometry> layers(6, VllmFlashNhdGeometry(64, 16, 1, 2, DType::kU8));
  layers.push_back(VllmFlashNhdGeometry(64, 16, 8, 256, DType::kBF16));
  layers.push_back(VllmFlashNhdGeometry(64, 16, 8, 256, DType::kBF16));
  const FakeGroups g = MakeFakeGroups(layers, kChunkTokens);
  ASSERT_EQ(g.groups.size(), 2u);
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const uint64_t chunk_bytes = g.layout.chunk_bytes();
  const std::vector<CopyPiece> pieces =
      SplitCopy(g.groups, steps, chunk_bytes, 1, 1, 4, chunk_bytes);
  ExpectExactCover(g, steps, pieces, 1, 1, "small then large");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[2].slices[1], (std::pair<uint32_t, uint32_t>(0, 1)));
  EXPECT_EQ(pieces[3].slices[1], (std::pair<uint32_t, uint32_t>(1, 1)));
  EXPECT_EQ(pieces[2].slices[0].second + pieces[3].slices[0].second, 0u);
}

TEST(MultipathSplit, LayerWiseStepsAreCutStepByStep) {
  const FakeGroups g = Llama8b();
  const CopySignal signal = LayerWise(32);
  const std::vector<CopyStep> steps = CopySteps(g.groups, &signal);  // 1, 1, 2, 4, 8, 16 layers
  ASSERT_EQ(steps.size(), 6u);
  const std::vector<CopyPiece> pieces = SplitCopy(g.groups, steps, 32 * kMiB, 3, 1, 4, 8 * kMiB);
  ExpectExactCover(g, steps, pieces, 3, 1, "layer-wise");
  // A step of fewer layers than paths: a piece per layer.
  std::vector<size_t> per_step(steps.size(), 0);
  for (const CopyPiece& p : pieces) ++per_step[p.step];
  EXPECT_EQ(per_step, (std::vector<size_t>{3, 3, 6, 12, 12, 12}));
}

TEST(MultipathSplit, EveryByteIsInExactlyOnePieceWhateverTheSizes) {
  // MLA FP8 (656-byte entries, 61 layers), int8 heads of 132 bytes, the
  // hybrid model; with and without layer ranges; 1 to 8 paths; pieces from
  // smaller than a layer to larger than the request.
  const std::vector<std::pair<std::string, FakeGroups>> layouts = {
      {"mla", MakeFakeGroups(
                  std::vector<LayerGeometry>(61, VllmFlashNhdGeometry(64, 64, 1, 656, DType::kU8)),
                  kChunkTokens)},
      {"int8", MakeFakeGroups(
                   std::vector<LayerGeometry>(27, VllmFlashNhdGeometry(64, 16, 4, 132, DType::kI8)),
                   kChunkTokens)},
      {"hybrid", Hybrid()},
      {"qwen", Qwen05b()}};
  for (const auto& [name, g] : layouts) {
    const uint64_t chunk_bytes = g.layout.chunk_bytes();
    uint32_t layers = 0;
    for (const GroupAddresses& a : g.groups) layers += a.group.shape.num_layers;
    const CopySignal layer_wise = LayerWise(layers);
    for (const bool ranges : {false, true}) {
      if (ranges && g.groups.size() > 1) continue;  // ranges name one group's layers here
      const std::vector<CopyStep> steps = CopySteps(g.groups, ranges ? &layer_wise : nullptr);
      for (const size_t chunks : {1, 2, 5, 17}) {
        for (const size_t paths : {1, 2, 3, 4, 8}) {
          for (const uint64_t piece :
               {uint64_t{4096}, chunk_bytes / 3, 8 * kMiB, std::numeric_limits<uint64_t>::max()}) {
            const size_t per_batch = ChunksPerBatch(chunk_bytes, paths, piece, 6);
            const std::vector<CopyPiece> pieces =
                SplitCopy(g.groups, steps, chunk_bytes, chunks, per_batch, paths, piece);
            const std::string what = name + (ranges ? " layer-wise" : "") + ", " +
                                     std::to_string(chunks) + " chunks, " + std::to_string(paths) +
                                     " paths, pieces of " + std::to_string(piece);
            ExpectExactCover(g, steps, pieces, chunks, per_batch, what);
            for (const size_t regions : {1, 2, 16}) {
              ExpectBatchesCover(PieceBatches(pieces, steps.size(), chunks, per_batch, regions),
                                 pieces, steps.size(), chunks, per_batch, regions,
                                 what + ", " + std::to_string(regions) + " regions");
            }
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(MultipathSplit, OnePiecePerPathAndStepWithoutAPieceSize) {
  // Direct mode: no staging to pipeline through.
  const FakeGroups g = Llama8b();
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const uint64_t whole = std::numeric_limits<uint64_t>::max();
  const std::vector<CopyPiece> many = SplitCopy(g.groups, steps, 32 * kMiB, 8, 8, 3, whole);
  ASSERT_EQ(many.size(), 3u);
  EXPECT_EQ(many[0].end - many[0].begin, 2u) << "runs of whole chunks";
  EXPECT_TRUE(many[0].windows.empty());
  const std::vector<CopyPiece> one = SplitCopy(g.groups, steps, 32 * kMiB, 1, 1, 3, whole);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[0].slices[0].second + one[1].slices[0].second + one[2].slices[0].second, 32u);
}

TEST(MultipathSplit, ARelaysCopiesTileItsPieceAndHopOnlyOneChunkWindows) {
  const FakeGroups g = Llama8b();
  const std::vector<CopyStep> steps = CopySteps(g.groups, nullptr);
  const std::vector<CopyPiece> one = SplitCopy(g.groups, steps, 32 * kMiB, 1, 1, 4, 8 * kMiB);
  // 8 MiB of one chunk: four hops of 2 MiB at the end of a step, one copy
  // elsewhere.
  const std::vector<RelayCopy> hops = RelayCopies(one[1], 32 * kMiB, true, 2 * kMiB);
  ASSERT_EQ(hops.size(), 4u);
  for (size_t i = 0; i < hops.size(); ++i) {
    EXPECT_EQ(hops[i].lo, one[1].windows[0].first + i * 2 * kMiB);
    EXPECT_EQ(hops[i].width, 2 * kMiB);
    EXPECT_EQ(hops[i].packed, i * 2 * kMiB);
  }
  EXPECT_EQ(RelayCopies(one[1], 32 * kMiB, false, 2 * kMiB).size(), 1u);
  EXPECT_EQ(RelayCopies(one[1], 32 * kMiB, true, 4 * kMiB).size(), 1u) << "not above two hops";
  // Whole chunks, several rows: one copy per window, never in hops; the
  // packed rows of every copy tile the piece.
  for (const auto& [name, groups] : std::vector<std::pair<std::string, FakeGroups>>{
           {"qwen", Qwen05b()}, {"hybrid", Hybrid()}, {"llama", Llama8b()}}) {
    const uint64_t chunk_bytes = groups.layout.chunk_bytes();
    const std::vector<CopyStep> all = CopySteps(groups.groups, nullptr);
    for (const uint64_t piece_bytes : {chunk_bytes / 5, 2 * chunk_bytes, 8 * kMiB}) {
      for (const CopyPiece& p : SplitCopy(groups.groups, all, chunk_bytes, 6, 3, 2, piece_bytes)) {
        SCOPED_TRACE(name + " pieces of " + std::to_string(piece_bytes));
        const uint64_t rows = p.end - p.begin;
        const std::vector<RelayCopy> copies = RelayCopies(p, chunk_bytes, true, 4096);
        if (rows > 1) {
          EXPECT_EQ(copies.size(), std::max<size_t>(1, p.windows.size())) << "no hops";
        }
        uint64_t next = 0;
        for (const RelayCopy& c : copies) {
          EXPECT_EQ(c.packed, next) << "packed copies follow each other";
          next += rows * c.width;
        }
        EXPECT_EQ(next, p.bytes);
      }
    }
  }
}

TEST(MultipathSplit, AStepWithoutLayersHasNoBatchesButKeepsItsPlace) {
  const FakeGroups g = Llama8b();
  const std::vector<CopyStep> steps = {StepOf(g, 0, 4, {0}), StepOf(g, 0, 0, {1}),
                                       StepOf(g, 4, 28, {2})};
  const Walk walk = WalkOf(g, steps, 3, 1, 2, 8 * kMiB, 4, "a step without layers");
  ASSERT_EQ(walk.batches.size(), 3u) << "one list per step, empty or not";
  EXPECT_EQ(walk.batches[0].size(), 3u);
  EXPECT_TRUE(walk.batches[1].empty());
  ASSERT_EQ(walk.batches[2].size(), 3u);
  EXPECT_EQ(walk.batches[2][0].first, walk.batches[0].back().first + walk.batches[0].back().count)
      << "the step after it takes up the pieces where the one before it stopped";
  // Steps past the last piece have their lists too.
  const std::vector<std::vector<PieceBatch>> more = PieceBatches(walk.pieces, 5, 3, 1, 4);
  ASSERT_EQ(more.size(), 5u);
  EXPECT_TRUE(more[4].empty());
  EXPECT_TRUE(PieceBatches({}, 2, 3, 1, 4)[0].empty());
}

TEST(MultipathSplit, APartialLastBatchEndsAtTheLastChunk) {
  const FakeGroups g = Qwen05b();  // 3 MiB chunks
  const Walk walk = WalkOf(g, CopySteps(g.groups, nullptr), 5, 2, 2, 3 * kMiB, 4, "5 chunks");
  const std::vector<PieceBatch>& batches = walk.batches[0];
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].begin, 4u);
  EXPECT_EQ(batches[2].end, 5u);
  EXPECT_EQ((std::vector<bool>{batches[0].last, batches[1].last, batches[2].last}),
            (std::vector<bool>{false, false, true}));
  for (const PieceBatch& b : batches) EXPECT_FALSE(b.refill) << "3 batches fit 4 regions";
}

TEST(MultipathSplit, RegionsAreRefilledOnlyWhereBatchesOutnumberThem) {
  const FakeGroups g = Llama8b();
  const CopySignal signal = LayerWise(32);
  const std::vector<CopyStep> steps = CopySteps(g.groups, &signal);  // 1, 1, 2, 4, 8, 16 layers
  // 4 batches of one chunk over 2 regions: the third batch of the first
  // step refills the first region, and every batch of a later step refills.
  const Walk reused = WalkOf(g, steps, 4, 1, 2, 8 * kMiB, 2, "4 batches, 2 regions");
  const std::vector<PieceBatch>& first = reused.batches[0];
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(
      (std::vector<size_t>{first[0].region, first[1].region, first[2].region, first[3].region}),
      (std::vector<size_t>{0, 1, 0, 1}));
  EXPECT_EQ((std::vector<bool>{first[0].refill, first[1].refill, first[2].refill, first[3].refill}),
            (std::vector<bool>{false, false, true, true}));
  for (size_t s = 1; s < steps.size(); ++s) {
    ASSERT_EQ(reused.batches[s].size(), 4u);
    for (const PieceBatch& b : reused.batches[s]) EXPECT_TRUE(b.refill) << "step " << s;
  }
  // 2 batches over 2 regions: every chunk keeps its slot, and a later step
  // writes other bytes of it, so nothing waits, whatever the step.
  const Walk own = WalkOf(g, steps, 2, 1, 2, 8 * kMiB, 2, "2 batches, 2 regions");
  for (size_t s = 0; s < steps.size(); ++s) {
    ASSERT_EQ(own.batches[s].size(), 2u);
    for (const PieceBatch& b : own.batches[s]) EXPECT_FALSE(b.refill) << "step " << s;
  }
}

TEST(MultipathSplit, AStepsPiecesSpanSeveralBatches) {
  const FakeGroups g = Llama8b();
  const CopySignal signal = LayerWise(32);
  const std::vector<CopyStep> steps = CopySteps(g.groups, &signal);  // 1, 1, 2, 4, 8, 16 layers
  const Walk walk = WalkOf(g, steps, 3, 1, 4, 8 * kMiB, 16, "layer-wise, 3 chunks");
  // The step of 4 layers: a piece per layer in each of the 3 batches.
  ASSERT_EQ(walk.batches[3].size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(walk.batches[3][b].batch, b);
    EXPECT_EQ(walk.batches[3][b].count, 4u);
    EXPECT_EQ(walk.batches[3][b].begin, b);
    EXPECT_EQ(walk.batches[3][b].end, b + 1);
  }
  // The first step: a piece (its one layer) per batch.
  ASSERT_EQ(walk.batches[0].size(), 3u);
  for (const PieceBatch& b : walk.batches[0]) EXPECT_EQ(b.count, 1u);
}

TEST(MultipathSplit, EachPieceGoesToTheLeastLoadedUsablePath) {
  EXPECT_EQ(LeastLoadedPath({0, 0, 0}, {true, true, true}), 0u) << "the own link on a tie";
  EXPECT_EQ(LeastLoadedPath({5, 0, 3}, {true, true, true}), 1u);
  EXPECT_EQ(LeastLoadedPath({5, 0, 3}, {true, false, true}), 2u) << "a busy relay is skipped";
  EXPECT_EQ(LeastLoadedPath({5, 0, 3}, {true, false, false}), 0u) << "the own link always";
  EXPECT_EQ(LeastLoadedPath({7}, {true}), 0u);
}

}  // namespace
}  // namespace kvstash::backends
