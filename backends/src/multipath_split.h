// How a multi-path copy (a retrieve or a store) is cut into pieces, and
// which path carries each. Plain C++ over the chunk format (no CUDA types),
// so that it is tested everywhere; the copy lane enqueues what it says. Both
// directions cut the same way: a store's piece is the same window of the
// same chunks, only gathered before its copies instead of scattered after.
//
// A piece is a run of chunks times a range of one step's layers. In the
// flat format a group's layers are consecutive, so a piece is one byte
// window per group in each of its chunks: it moves with one copy per window
// and chunk (one 2D copy over chunks adjacent in L1), and the target
// scatters (gathers) it with one kernel per group. The cut:
//   - a batch (a run of chunks sharing one region of the target's staging)
//     is cut into a multiple of `paths` pieces of equal bytes, to a layer,
//     so that every path carries the same share of it;
//   - a piece is about `piece_bytes`: small enough that a relay's host copy
//     of one piece overlaps its NVLink copy of the one before (a store: its
//     host copy of one piece overlaps its NVLink copy of the next), and
//     that the target scatters a piece while the next ones arrive (what
//     nothing hides is one piece's hop and scatter, not a chunk's); large enough
//     that each copy's and launch's fixed cost (a few microseconds) stays a
//     few percent of it;
//   - large chunks are cut by layers (a 32 MiB Llama-3-8B chunk: one chunk
//     per batch, four pieces of 8 layers over four paths, or two pieces
//     per path over two); small ones go whole, several to a piece (a layer
//     of a 3 MiB chunk is 128 KiB, too small to be worth a copy of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda_copy_steps.h"

namespace kvstash::backends {

struct CopyPiece {
  size_t step = 0;   // the CopyStep whose layers it carries (part of)
  size_t batch = 0;  // chunks [batch * chunks_per_batch, ...) share a staging region
  size_t begin = 0;  // chunks [begin, end), inside the batch
  size_t end = 0;
  std::vector<std::pair<uint32_t, uint32_t>> slices;   // per group: (first, count) of its layers
  std::vector<std::pair<uint64_t, uint64_t>> windows;  // inside a flat chunk; empty: all of it
  uint64_t bytes = 0;                                  // copied: (end - begin) x the windows
};

// Chunks per batch for `paths` paths: a whole chunk per piece and `paths`
// pieces where a chunk holds no more than `piece_bytes`, otherwise as many
// chunks as `paths` pieces of `piece_bytes` take (at least one); never more
// than `max_chunks` (at least 1).
size_t ChunksPerBatch(uint64_t chunk_bytes, size_t paths, uint64_t piece_bytes, size_t max_chunks);

// Every piece of a copy of `chunks` chunks, step by step and, within a
// step, batch by batch: the order in which they are enqueued. Each byte of
// each chunk that a step covers is in exactly one piece, which never spans
// two batches or two steps. A step without layers has no pieces.
std::vector<CopyPiece> SplitCopy(const std::vector<GroupAddresses>& groups,
                                 const std::vector<CopyStep>& steps, uint64_t chunk_bytes,
                                 size_t chunks, size_t chunks_per_batch, size_t paths,
                                 uint64_t piece_bytes);

// One batch of one step, as a dma copy enqueues it: the step's pieces over
// chunks [begin, end), which share one region of the target's staging.
struct PieceBatch {
  size_t step = 0;
  size_t batch = 0;  // chunks [batch * chunks_per_batch, ...)
  size_t first = 0;  // its pieces: [first, first + count) of the copy's
  size_t count = 0;  // at least one
  size_t begin = 0;  // its chunks [begin, end)
  size_t end = 0;
  size_t region = 0;    // of the target's staging: batch % regions
  bool refill = false;  // the region held an earlier batch: wait till it is free
  bool last = false;    // the copy's last chunks
};

// The batches of a copy of `chunks` chunks cut into `pieces` (SplitCopy's,
// in its order), per step of `steps`: those with pieces, in the order they
// are enqueued (none for a step without layers, whose slots are still
// signalled after the steps before it). Batch b lands in region
// b % regions; a region is refilled only where a step's batches outnumber
// the regions, then by every batch from the regions-th on, counted across
// steps.
std::vector<std::vector<PieceBatch>> PieceBatches(const std::vector<CopyPiece>& pieces,
                                                  size_t steps, size_t chunks,
                                                  size_t chunks_per_batch, size_t regions);

// One copy of a piece through a relay: the window [lo, lo + width) of each
// of the piece's chunks, between L1 and the relay's staging at `packed`
// (its rows `width` apart there), and over NVLink between that and the
// target's staging (rows a chunk apart). A retrieve goes L1 -> relay ->
// target, a store target -> relay -> L1.
struct RelayCopy {
  uint64_t lo = 0;
  uint64_t width = 0;
  uint64_t packed = 0;
};

// The copies of `piece` through a relay, in order: one per window; where
// `in_hops`, a one-chunk window larger than two hops goes in hops of
// `hop_bytes`, each sent over NVLink once it has landed, so that the
// scatter waits for the last hop's NVLink copy only (a store: each hop
// goes to L1 once it crossed NVLink, so that the relay's host copy starts
// after the first hop, not the whole piece). Their packed bytes tile
// [0, piece.bytes) once.
std::vector<RelayCopy> RelayCopies(const CopyPiece& piece, uint64_t chunk_bytes, bool in_hops,
                                   uint64_t hop_bytes);

// The path of the next piece: of the usable ones (usable[0], the target's
// own link, always is), the one that has carried the fewest bytes so far;
// the lowest on a tie, so that the own link, which has no NVLink hop,
// takes each batch's first piece.
size_t LeastLoadedPath(const std::vector<uint64_t>& carried, const std::vector<bool>& usable);

// The path of each piece when every path stays usable.
std::vector<size_t> AssignPieces(const std::vector<CopyPiece>& pieces, size_t paths);

}  // namespace kvstash::backends
