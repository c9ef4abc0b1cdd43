// The pieces of a multi-path copy.
#include "multipath_split.h"

#include <algorithm>
#include <limits>

namespace kvstash::backends {

namespace {

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    return std::numeric_limits<uint64_t>::max();
  return a * b;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// One layer of one group: layer ranges are cut between these.
struct LayerUnit {
  size_t group;
  uint32_t layer;
  uint64_t bytes;  // in one chunk
};

// The pieces of `step` over chunks [begin, end) of one batch.
void SplitBatch(const std::vector<GroupAddresses>& groups, const CopyStep& step, size_t step_index,
                size_t batch, size_t begin, size_t end, uint64_t chunk_bytes, size_t paths,
                uint64_t piece_bytes, std::vector<CopyPiece>& out) {
  std::vector<LayerUnit> units;
  for (size_t g = 0; g < step.slices.size() && g < groups.size(); ++g) {
    const auto [first, count] = step.slices[g];
    for (uint32_t l = first; l < first + count; ++l)
      units.push_back({g, l, FlatLayerBytes(groups[g].group.shape)});
  }
  if (units.empty() || end <= begin) return;
  uint64_t step_bytes = step.windows.empty() ? chunk_bytes : 0;
  for (const auto& [lo, hi] : step.windows) step_bytes += hi - lo;
  const size_t rows = end - begin;
  const auto whole_step = [&](size_t b0, size_t b1) {
    out.push_back({step_index, batch, b0, b1, step.slices, step.windows, (b1 - b0) * step_bytes});
  };
  // A multiple of `paths` pieces, each at most about piece_bytes.
  const uint64_t per_path = CeilDiv(uint64_t(rows) * step_bytes, paths);
  const uint64_t want = SaturatingMul(paths, std::max<uint64_t>(1, CeilDiv(per_path, piece_bytes)));
  if (want <= rows) {
    // Runs of whole chunks (of the step's layers): one copy per window and
    // run of chunks adjacent in L1. Run sizes differ by one chunk at most.
    for (uint64_t j = 0; j < want; ++j)
      whole_step(begin + j * rows / want, begin + (j + 1) * rows / want);
    return;
  }
  // Layer ranges over every chunk of the batch, cut where the bytes before
  // the cut come closest to an equal share (layers of different groups may
  // differ in size).
  const size_t k = size_t(std::min<uint64_t>(want, units.size()));
  if (k == 1) {
    whole_step(begin, end);
    return;
  }
  std::vector<uint64_t> before(units.size() + 1, 0);  // bytes of units [0, u)
  for (size_t u = 0; u < units.size(); ++u) before[u + 1] = before[u] + units[u].bytes;
  std::vector<size_t> cuts(k + 1, 0);
  cuts[k] = units.size();
  for (size_t j = 1; j < k; ++j) {
    const uint64_t share = before.back() * j / k;
    const size_t lo = cuts[j - 1] + 1, hi = units.size() - (k - j);  // a unit each at least
    size_t u =
        size_t(std::lower_bound(before.begin() + long(lo), before.begin() + long(hi) + 1, share) -
               before.begin());
    u = std::min(u, hi);  // past hi: the units left must go one to a piece
    if (u > lo && before[u] >= share && share - before[u - 1] < before[u] - share) --u;
    cuts[j] = u;
  }
  for (size_t j = 0; j < k; ++j) {
    CopyPiece piece{step_index, batch, begin, end};
    piece.slices.assign(step.slices.size(), {0, 0});
    for (size_t u = cuts[j]; u < cuts[j + 1]; ++u) {
      auto& [first, count] = piece.slices[units[u].group];
      if (count == 0) first = units[u].layer;
      ++count;
    }
    piece.windows = FlatWindows(groups, piece.slices);
    uint64_t window_bytes = 0;
    for (const auto& [lo, hi] : piece.windows) window_bytes += hi - lo;
    piece.bytes = rows * window_bytes;
    out.push_back(std::move(piece));
  }
}

}  // namespace

size_t ChunksPerBatch(uint64_t chunk_bytes, size_t paths, uint64_t piece_bytes, size_t max_chunks) {
  max_chunks = std::max<size_t>(1, max_chunks);
  paths = std::max<size_t>(1, paths);
  piece_bytes = std::max<uint64_t>(1, piece_bytes);
  if (chunk_bytes == 0) return 1;
  const uint64_t chunks = chunk_bytes <= piece_bytes
                              ? SaturatingMul(paths, piece_bytes / chunk_bytes)
                              : SaturatingMul(paths, piece_bytes) / chunk_bytes;
  return size_t(std::clamp<uint64_t>(chunks, 1, max_chunks));
}

std::vector<CopyPiece> SplitCopy(const std::vector<GroupAddresses>& groups,
                                 const std::vector<CopyStep>& steps, uint64_t chunk_bytes,
                                 size_t chunks, size_t chunks_per_batch, size_t paths,
                                 uint64_t piece_bytes) {
  std::vector<CopyPiece> pieces;
  const size_t per_batch = std::max<size_t>(1, chunks_per_batch);
  paths = std::max<size_t>(1, paths);
  piece_bytes = std::max<uint64_t>(1, piece_bytes);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t b = 0, begin = 0; begin < chunks; ++b, begin += per_batch) {
      SplitBatch(groups, steps[s], s, b, begin, std::min(chunks, begin + per_batch), chunk_bytes,
                 paths, piece_bytes, pieces);
    }
  }
  return pieces;
}

std::vector<std::vector<PieceBatch>> PieceBatches(const std::vector<CopyPiece>& pieces,
                                                  size_t steps, size_t chunks,
                                                  size_t chunks_per_batch, size_t regions) {
  const size_t per_batch = std::max<size_t>(1, chunks_per_batch);
  regions = std::max<size_t>(1, regions);
  const size_t batches = (chunks + per_batch - 1) / per_batch;
  // Where every batch of a step has a region of its own, a later step
  // touches other bytes of the same chunks' slots: no batch waits.
  const bool reuse = batches > regions;
  std::vector<std::vector<PieceBatch>> out(steps);
  size_t next = 0;  // pieces come step by step, batch by batch
  for (size_t s = 0; s < steps; ++s) {
    for (size_t b = 0; b < batches; ++b) {
      const size_t first = next;
      while (next < pieces.size() && pieces[next].step == s && pieces[next].batch == b) ++next;
      if (next == first) continue;  // a step without layers
      const size_t begin = b * per_batch;
      out[s].push_back({s, b, first, next - first, begin, std::min(chunks, begin + per_batch),
                        b % regions, reuse && s * batches + b >= regions, b + 1 == batches});
    }
  }
  return out;
}

std::vector<RelayCopy> RelayCopies(const CopyPiece& piece, uint64_t chunk_bytes, bool in_hops,
                                   uint64_t hop_bytes) {
  const uint64_t rows = piece.end - piece.begin;
  const std::vector<std::pair<uint64_t, uint64_t>> whole = {{0, chunk_bytes}};
  hop_bytes = std::max<uint64_t>(1, hop_bytes);
  std::vector<RelayCopy> copies;
  uint64_t packed = 0;
  for (const auto& [lo, hi] : piece.windows.empty() ? whole : piece.windows) {
    const uint64_t width = hi - lo;
    const uint64_t hop = in_hops && rows == 1 && width > 2 * hop_bytes ? hop_bytes : width;
    for (uint64_t offset = 0; offset < width; offset += hop)
      copies.push_back({lo + offset, std::min(hop, width - offset), packed + offset});
    packed += rows * width;
  }
  return copies;
}

size_t LeastLoadedPath(const std::vector<uint64_t>& carried, const std::vector<bool>& usable) {
  size_t best = 0;
  for (size_t p = 1; p < carried.size(); ++p) {
    if (p < usable.size() && usable[p] && carried[p] < carried[best]) best = p;
  }
  return best;
}

std::vector<size_t> AssignPieces(const std::vector<CopyPiece>& pieces, size_t paths) {
  std::vector<uint64_t> carried(std::max<size_t>(1, paths), 0);
  const std::vector<bool> usable(carried.size(), true);
  std::vector<size_t> path;
  for (const CopyPiece& piece : pieces) {
    path.push_back(LeastLoadedPath(carried, usable));
    carried[path.back()] += piece.bytes;
  }
  return path;
}

}  // namespace kvstash::backends
