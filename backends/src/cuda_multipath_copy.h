// A copy lane's copies that other GPUs help carry (multi-path), over the
// lane's primitives (cuda_lane_core.h).
//
//   retrieves: other GPUs that reach this one over NVLink carry part of a
//          retrieve while their own retrieve lanes are idle
//          (multipath_policy.h), each over its own PCIe link. The retrieve
//          is cut into pieces, a run of chunks times a range of layers
//          each, every path taking the same bytes of each batch of chunks
//          (multipath_split.h); pieces go, in order, to the path that has
//          carried the fewest bytes so far.
//          dma: a relay's piece goes L1 slots -> cudaMemcpyAsync on the
//          relay -> its staging (packed) -> cudaMemcpyPeerAsync over NVLink
//          -> the chunks' slots in this GPU's staging, then the scatter of
//          that piece on this GPU's kernel stream. The relay's host copy of
//          one piece runs while its NVLink copy of the one before does; a
//          step's last pieces, whose hop nothing hides, go over NVLink in
//          hops, each sent once it landed.
//          direct: each path's scatter kernel writes its piece of each step
//          over NVLink; this kernel stream waits for it at each step.
//          Either way every board slot is written on this lane's kernel
//          stream, after it has waited for every path that carried part of
//          that range. This lane thread enqueues all of it, on both GPUs,
//          so no event is waited for before it is recorded. A relay whose
//          copy fails is abandoned (never used again) and what it had not
//          delivered goes over this GPU's own link; one whose own queue fills
//          is given no further piece (checked before each batch). A piece
//          is enqueued in two parts, so that every path's first piece of a
//          batch starts before the NVLink copies are enqueued.
//   stores: the same relays' store halves, while their own store lanes are
//          idle, cut and assigned as retrieves.
//          dma: each batch is gathered once into this GPU's staging; a
//          relay's piece then goes cudaMemcpyPeerAsync over NVLink (the
//          relay pulls it) -> its staging (packed) -> cudaMemcpyAsync on
//          the relay's host stream -> the L1 slots; the first batch's
//          pieces go in hops, each sent to L1 once it crossed. This GPU's
//          region is gathered into again only once its own copies and every
//          relay's NVLink copies out of it are done (region_free, freed);
//          a relay's region once its host copy is done (landed).
//          direct: each path's gather kernel reads its piece of the
//          engine's blocks over NVLink and writes the mapped L1 slots.
//          The done slot is written on this kernel stream once every
//          path's reads of the engine's blocks are done: after the last
//          gather here (dma), after every relay's kernels too (direct).
//
// Used by its lane's thread only; the relays it holds are held by no other
// lane meanwhile (CudaRelayPath::TryAcquire).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cuda_copy_steps.h"
#include "cuda_lane_core.h"
#include "cuda_relay_path.h"
#include "cuda_single_path_copy.h"
#include "kvstash/backends/link_loads.h"
#include "multipath_policy.h"
#include "multipath_split.h"

namespace kvstash::backends {

class CudaMultipathCopy {
 public:
  // The GPUs that may carry part of the lane's copies (their relay paths of
  // the lane's direction), and the per-link queues that say when they are
  // idle.
  struct Relays {
    std::vector<CudaRelayPath*> paths;  // reach this GPU over NVLink, peer access on
    const LinkLoads* loads = nullptr;   // required with paths
    MultipathPolicy policy;
    // dma mode: a copy is cut into pieces of about this many bytes
    // (multipath_split.h; at most half a relay's staging).
    uint64_t piece_bytes = 8 << 20;
    // A retrieve relay's piece at the end of a step goes over NVLink in
    // hops of this size, each sent once it has landed: the scatter then
    // waits for the last hop only, not for the NVLink copy of the whole
    // piece. A store relay's pieces of the first batch go in hops, each
    // sent to L1 once it crossed NVLink.
    uint64_t hop_bytes = 2 << 20;
    // Tests: called once per piece a relay carries, before its first copy
    // over NVLink (dma retrieve: its first host copy enqueued) or its
    // kernel (direct); an error makes that relay fail as a CUDA error would.
    std::function<Status(int relay_device, size_t piece)> fault;
  };

  // `single`: what a dma copy falls back to where no relay fits.
  CudaMultipathCopy(CudaLaneCore& lane, CudaSinglePathCopy& single)
      : lane_(lane), single_(single) {}
  // Set once, before the first copy; without it every copy has one path.
  void SetRelays(Relays relays) { relays_ = std::move(relays); }
  // Copies (of this lane's direction) that more than one path carried.
  uint64_t copies() const { return copies_.load(std::memory_order_relaxed); }

  // Takes the relays the policy picks for a copy of `chunks` chunks of
  // `layout` (their queues read now); returns how many it holds.
  size_t Acquire(const CopyLayout& layout, size_t chunks);
  // Direct mode: gives back the held relays on which the engine's memory is
  // not open; returns how many it still holds.
  size_t KeepRelaysReaching(const CopyLayout& layout);
  // Direct mode with relays held: each step's pieces, one per path, each
  // scattered (gathered) by its path's GPU; a step's slots, and a store's
  // done slot, wait for every path.
  Status Direct(const CopyLayout& layout, const LayerAddresses& addresses,
                const std::vector<CopyStep>& steps, const std::vector<kernels::ChunkCopy>& chunks,
                const std::vector<uint8_t*>& flats, const CopySignal* signal);
  // dma mode with relays held: the copy cut into pieces, each through the
  // path that has carried the fewest bytes, batch by batch (a retrieve's
  // pieces into this GPU's staging, then scattered; a store's gathered
  // there once, then each to L1 over its path), each step's slots after its
  // batches. CudaSinglePathCopy's arguments; that one runs it where no
  // relay can take a piece.
  Status ThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                        const std::vector<kernels::ChunkCopy>& chunks,
                        const std::vector<uint32_t>& slabs, const CopySignal* signal,
                        const Expired& expired, size_t* stopped_at);
  // Before the lane drains: its kernel stream waits for the ends of the
  // held relays' streams, so that the drain covers them (abandoning a relay
  // where that fails).
  void Join();
  // After the drain: gives the held relays back once nothing of theirs is
  // in flight (drained: the lane's wait, which covers them, succeeded).
  void Release(bool drained);

 private:
  // A relay held for the current copy, and how it lays out pieces.
  struct HeldRelay {
    CudaRelayPath* path = nullptr;
    size_t regions = 0;                         // of region_bytes each in its staging
    uint64_t region_bytes = 0;                  // the largest piece of the request
    size_t used = 0;                            // pieces it carried so far in this request
    uint64_t bytes = 0;                         // bytes it carried in this request
    const LayerAddresses* addresses = nullptr;  // direct mode: the layers as it reaches them
  };
  // What the pieces of one dma copy read and write: its chunks, their L1
  // slabs, their slots in this GPU's staging.
  struct StagedCopy {
    const std::vector<kernels::ChunkCopy>& chunks;
    const std::vector<uint32_t>& slabs;
    const std::vector<uint8_t*>& flats;
    uint64_t chunk_bytes;
  };
  // One dma copy cut for its paths (this GPU's link, then the held relays):
  // its steps, pieces and batches, and what each path carried so far.
  struct Cut {
    std::vector<CopyStep> steps;
    std::vector<CopyPiece> pieces;
    size_t per_batch = 1;  // chunks
    size_t regions = 1;    // of this GPU's staging
    std::vector<uint64_t> carried;
    std::vector<bool> usable;
  };
  // Where each piece of one batch of a dma retrieve goes, and how far it got.
  struct RetrieveBatch {
    const PieceBatch& batch;
    std::vector<size_t> path_of;
    std::vector<std::vector<RelayCopy>> relay_copies;
    std::vector<size_t> relay_region;
    std::vector<bool> started;
    bool copies_waited = false;  // the copy stream waits for the region's previous batch
  };

  // Whether held relay h may take another piece: not failed, and its own
  // queue of this lane's direction still idle.
  bool RelayUsable(const HeldRelay& h) const;
  // Marks the relays that may take no further piece, before a batch.
  void UpdateUsable(Cut& cut) const;
  // Direct mode: the registration's layer addresses as `path`'s GPU reaches
  // them (the engine's allocations opened there), uploaded at first use.
  Result<const LayerAddresses*> RelayAddressesOf(CudaRelayPath& path, const CopyLayout& layout);
  // Direct mode: every held relay's plan of every chunk (abandoning a relay
  // whose plan fails); usable[p]: whether path p may carry pieces.
  Status PlanOnRelays(const std::vector<kernels::ChunkCopy>& chunks, std::vector<bool>& usable);
  // The scatter (store: gather) of `piece` on the relay's link stream, from
  // its own plan of every chunk; the kernel stream waits for it.
  Status LaunchOnRelay(HeldRelay& h, const CopyPiece& piece, size_t piece_index);

  // dma mode: cuts the copy into pieces that fit every held relay's staging
  // twice, giving back the relays none fits; nullopt: no relay is left (or
  // this GPU's staging holds no chunk), the copy goes over one path.
  std::optional<Cut> CutCopy(const CopyLayout& layout, size_t chunks, const CopySignal* signal);
  // One batch of a dma retrieve: its pieces' paths, each path's first piece
  // started, then every piece finished and scattered.
  Status RetrieveBatchThroughPaths(const LayerAddresses& addresses, Cut& cut,
                                   const PieceBatch& batch, const StagedCopy& request);
  // A relay that failed on piece `from` of the batch: whatever it enqueued
  // has finished (Abandon waits for its streams), and its pieces of the
  // batch from that one on go over this link from the start.
  void GiveUpInBatch(Cut& cut, RetrieveBatch& rb, size_t p, size_t from, const Status& why);
  // Piece k of the batch by this GPU's link: H2D copy into its staging
  // (once the batch's region is free).
  Status CopyHere(Cut& cut, RetrieveBatch& rb, size_t k, const StagedCopy& request);
  // Each path's first piece of the batch starts first: a relay's first host
  // copy is then not enqueued behind the other relays' NVLink copies and
  // hops (every call costs microseconds of this thread).
  Status StartFirstPieces(Cut& cut, RetrieveBatch& rb, const StagedCopy& request);
  // Piece k, started or not: the rest of its copies, then its scatter.
  Status FinishPiece(const LayerAddresses& addresses, Cut& cut, RetrieveBatch& rb, size_t k,
                     const StagedCopy& request);
  // A piece through relay h, in two calls, so that every path's first
  // piece of a batch starts before any NVLink copy is enqueued: Start
  // enqueues its first host copy (copies[0], multipath_split.h) into the
  // region of the relay's staging it takes (`relay_region`, once free
  // there); Finish the rest of its host copies, every NVLink copy into
  // `flats` (after this GPU's `region` is free where wait_free), and the
  // kernel stream's wait for them. Both return on this lane's GPU.
  Status StartOnRelay(HeldRelay& h, const CopyPiece& piece, const std::vector<RelayCopy>& copies,
                      const StagedCopy& request, size_t* relay_region);
  Status FinishOnRelay(HeldRelay& h, const CopyPiece& piece, const std::vector<RelayCopy>& copies,
                       const StagedCopy& request, bool wait_free, size_t region,
                       size_t relay_region, size_t piece_index);
  // Copy `c` of `piece` between L1 and region r of relay h's staging (a
  // retrieve from L1, a store to it), on its host stream (its GPU
  // current): one per run of chunks adjacent in L1 and in one slab.
  Status CopyOnRelayLink(HeldRelay& h, size_t r, const CopyPiece& piece, const RelayCopy& c,
                         const StagedCopy& request);

  // The gather of one batch of a dma store into its region of this GPU's
  // staging, once every path took the bytes of the region's previous batch.
  Status GatherStoreBatch(const LayerAddresses& addresses, const Cut& cut, const PieceBatch& batch);
  // Each piece of the gathered batch to L1 over its path.
  Status SendStoreBatch(Cut& cut, const PieceBatch& batch, const StagedCopy& request);
  // A store's piece through relay h, once this GPU's `region` holds it
  // (region_ready): over NVLink into a region of the relay's staging (once
  // its previous bytes went to L1), then to L1 on the relay's host stream;
  // freed(region) marks the end of its NVLink copies. Returns on this
  // lane's GPU.
  Status StoreOnRelay(HeldRelay& h, const CopyPiece& piece, const std::vector<RelayCopy>& copies,
                      const StagedCopy& request, size_t region, size_t piece_index);

  // Waits on the CPU for everything enqueued on h, then never uses it again.
  void Abandon(HeldRelay& h, const Status& why);

  CudaLaneCore& lane_;
  CudaSinglePathCopy& single_;
  Relays relays_;                // set before the first copy
  std::vector<HeldRelay> held_;  // during a copy only
  std::atomic<uint64_t> copies_{0};
};

}  // namespace kvstash::backends
