// The copies of one (GPU, direction): two streams (kernels, copy engine), the
// events that chain them, the plan arena and, in dma mode, this direction's
// half of the device's staging ring.
//
//   dma    store:    gather kernel -> staging -> cudaMemcpyAsync -> L1 slot
//          retrieve: L1 slot -> cudaMemcpyAsync -> staging -> scatter kernel
//          A batch runs in sub-batches (about 8 MiB, one chunk at least),
//          each in its own region of the ring, so kernels overlap copies
//          and a batch larger than the ring waits only for regions to free.
//   layer-wise retrieves (a board slot per layer range) copy and scatter
//          the ranges in steps of 1, 1, 2, 4, ... ranges, each step's slots
//          written after its scatter: the first layer is usable after its
//          own copy, and the many small copies of a 60- or 80-range request
//          do not each pay a copy's and a launch's fixed cost.
//   direct the kernels read and write the mapped pinned L1 slots themselves:
//          no GPU staging memory at all.
//   multi-path retrieves (with relays): other GPUs that reach this one
//          over NVLink carry part of a retrieve while their own retrieve
//          lanes are idle (multipath_policy.h), each over its own PCIe link.
//          The retrieve is cut into pieces, a run of chunks times a range of
//          layers each, every path taking the same bytes of each batch of
//          chunks (multipath_split.h); pieces go, in order, to the path that
//          has carried the fewest bytes so far.
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
//   multi-path stores (with relays): the same relays' store halves, while
//          their own store lanes are idle, cut and assigned as retrieves.
//          dma: each batch is gathered once into this GPU's staging; a
//          relay's piece then goes cudaMemcpyPeerAsync over NVLink (the
//          relay pulls it) -> its staging (packed) -> cudaMemcpyAsync on
//          the relay's host stream -> the L1 slots; the first batch's
//          pieces go in hops, each sent to L1 once it crossed. This GPU's
//          region is gathered into again only once its own copies and every
//          relay's NVLink copies out of it are done (region_free_, freed);
//          a relay's region once its host copy is done (landed).
//          direct: each path's gather kernel reads its piece of the
//          engine's blocks over NVLink and writes the mapped L1 slots.
//          The done slot is written on this kernel stream once every
//          path's reads of the engine's blocks are done: after the last
//          gather here (dma), after every relay's kernels too (direct).
//
// Every group's layer addresses go to the GPU once per registration (cached
// by registration id); a request uploads only its chunk entries and block
// ids, one plan for all its layer ranges (a range is a slice of layers the
// kernel is told). Copy returns once every byte has arrived. Meanwhile the lane thread
// sleeps: `block` sleeps on a blocking-sync event until the driver wakes it;
// `poll` sleeps through the shortest time the copy can take (its bytes over
// the highest bandwidth this lane has measured) and then checks every few
// microseconds (with busy polling: checks on a core without sleeping),
// falling back to the blocking wait for a copy far slower than that. Only
// its lane thread calls Copy, so nothing here needs a lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cuda_copy_plan.h"
#include "cuda_copy_steps.h"
#include "cuda_lane_trace.h"
#include "kvstash/backends/backend.h"
#include "kvstash/config/server_config.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/streams.h"
#include "multipath_policy.h"
#include "multipath_split.h"
#include "registration_cache.h"

namespace kvstash::backends {

class CudaRelayPath;
class LinkLoads;

using config::CompletionWait;  // parsed once, in the config
using config::TransferMode;

class CudaCopyLane {
 public:
  struct Options {
    int device = 0;
    Direction direction = Direction::kStore;
    TransferMode mode = TransferMode::kDma;
    uint64_t staging_bytes = 0;  // dma mode
    CompletionWait wait = CompletionWait::kBlock;
    bool busy_poll = false;                // poll: check on a core, no sleeps
    bool trace = false;                    // time each sub-batch (debug logs)
    bool host_pointers_on_device = false;  // registered host memory has one address everywhere
  };
  static Result<std::unique_ptr<CudaCopyLane>> Create(const Options& options);

  // Multi-path copies: the GPUs that may carry part of this lane's copies
  // (their relay paths of this lane's direction), and the per-link queues
  // that say when they are idle.
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
  // Set once, before the first Copy; without it every copy has one path.
  void SetRelays(Relays relays) { relays_ = std::move(relays); }

  // Chunks past their deadline are left out before anything is enqueued;
  // in dma mode each sub-batch (with relays, each batch) is checked again
  // before it is enqueued, and once one is past, it and the rest are left
  // out (deadlines.missed).
  // With a signal (may be null): a store's done slot is written after the
  // last gather of every path (its gate was open before the store reached
  // the lane); a
  // retrieve writes each layer range's slot after that range's scatter
  // (cuStreamWriteValue32). slabs[i]: chunk i's L1 slab; adjacent slots are
  // copied as one only inside one slab (each slab is pinned on its own).
  Status Copy(const CopyLayout& layout, const std::vector<kernels::ChunkCopy>& chunks,
              const std::vector<uint32_t>& slabs, CopyDeadlines& deadlines,
              const CopySignal* signal);

  uint64_t staging_bytes() const { return staging_.size(); }
  // The plan arena and the cached layer addresses on the GPU (the arena
  // takes as much pinned host memory again).
  uint64_t plan_bytes() const { return plan_bytes_.load(std::memory_order_relaxed); }
  // Copies (of this lane's direction) that more than one path carried.
  uint64_t multipath_copies() const { return multipath_copies_.load(std::memory_order_relaxed); }

 private:
  explicit CudaCopyLane(const Options& options) : options_(options) {}
  // The registration's layer addresses on this GPU, uploaded at first use.
  Result<const LayerAddresses*> AddressesOf(const CopyLayout& layout);
  // Enqueues the write of slot's value on the kernel stream.
  Status SignalSlot(const CopySignal& signal, uint32_t slot);
  Status CopyDirect(const CopyLayout& layout, const LayerAddresses& addresses,
                    const std::vector<CopyStep>& steps,
                    const std::vector<kernels::ChunkCopy>& chunks, const CopySignal* signal);
  // expired(begin, end): whether a chunk of [begin, end) is past its
  // deadline now; then nothing from `begin` on is enqueued, and the return
  // value says where it stopped.
  Status CopyThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                            const std::vector<kernels::ChunkCopy>& chunks,
                            const std::vector<uint32_t>& slabs, const CopySignal* signal,
                            const std::function<bool(size_t, size_t)>& expired, size_t* stopped_at);
  // One kernel per group with layers in `slices` (per group: first,
  // count) over chunks [begin, begin + count) of the plan; `trace_step`
  // names the sub-batch for the trace.
  Status Launch(const LayerAddresses& addresses,
                const std::vector<std::pair<uint32_t, uint32_t>>& slices, size_t begin,
                size_t count, size_t trace_step);
  // The kernels of Launch (a gather for a store, a scatter for a retrieve)
  // over `batch` on `stream`, whose GPU is current: a relay's too.
  Status LaunchGroups(const LayerAddresses& addresses,
                      const std::vector<std::pair<uint32_t, uint32_t>>& slices,
                      const kernels::DeviceChunkBatch& batch, cudaStream_t stream) const;
  // cudaMemcpyAsync between L1 slots and staging for chunks [begin, end):
  // per window, one copy per run of slots adjacent in both and in one slab
  // (a 2D copy where the window is less than a chunk).
  // `stream`: the copy stream, or a relay's host stream (then untraced:
  // the trace's events live on this GPU).
  Status CopySlots(const std::vector<kernels::ChunkCopy>& chunks,
                   const std::vector<uint32_t>& slabs, const std::vector<uint8_t*>& flats,
                   size_t begin, size_t end, uint64_t chunk_bytes, size_t trace_step,
                   const std::vector<std::pair<uint64_t, uint64_t>>& windows,
                   cudaStream_t stream = nullptr);
  // Each of `chunks` chunks' slot in the staging ring, for the whole
  // request (one plan serves every step): chunk i in region
  // (i / per_region) % regions.
  std::vector<uint8_t*> StagingSlots(size_t chunks, size_t per_region, size_t regions,
                                     uint64_t chunk_bytes) const;
  // A relay held for the current copy, and how it lays out pieces.
  struct HeldRelay {
    CudaRelayPath* path = nullptr;
    size_t regions = 0;                         // of region_bytes each in its staging
    uint64_t region_bytes = 0;                  // the largest piece of the request
    size_t used = 0;                            // pieces it carried so far in this request
    uint64_t bytes = 0;                         // bytes it carried in this request
    const LayerAddresses* addresses = nullptr;  // direct mode: the layers as it reaches them
  };
  // Direct mode: the registration's layer addresses as `path`'s GPU reaches
  // them (the engine's allocations opened there), uploaded at first use.
  Result<const LayerAddresses*> RelayAddressesOf(CudaRelayPath& path, const CopyLayout& layout);
  // Direct mode with relays held: each step's pieces, one per path, each
  // scattered (gathered) by its path's GPU; a step's slots, and a store's
  // done slot, wait for every path.
  Status CopyDirectMultipath(const CopyLayout& layout, const LayerAddresses& addresses,
                             const std::vector<CopyStep>& steps,
                             const std::vector<kernels::ChunkCopy>& chunks,
                             const std::vector<uint8_t*>& flats, const CopySignal* signal);
  // The scatter (store: gather) of `piece` on the relay's link stream, from
  // its own plan of every chunk; the kernel stream waits for it.
  Status LaunchOnRelay(HeldRelay& h, const CopyPiece& piece, size_t piece_index);
  // dma mode with relays held: the copy cut into pieces, each through
  // the path that has carried the fewest bytes (CopyThroughStaging's
  // arguments; that one runs it where no relay can take a piece).
  Status CopyThroughStagingMultipath(const CopyLayout& layout, const LayerAddresses& addresses,
                                     const std::vector<kernels::ChunkCopy>& chunks,
                                     const std::vector<uint32_t>& slabs, const CopySignal* signal,
                                     const std::function<bool(size_t, size_t)>& expired,
                                     size_t* stopped_at);
  // Takes the relays the policy picks for a copy of `chunks` chunks of
  // `layout` (their queues read now) into held_; returns how many.
  size_t AcquireRelays(const CopyLayout& layout, size_t chunks);
  // Whether held relay h may take another piece: not failed, and its own
  // queue of this lane's direction still idle.
  bool RelayUsable(const HeldRelay& h) const;
  // What the pieces of one dma copy read and write: its chunks, their L1
  // slabs, their slots in this GPU's staging.
  struct StagedCopy {
    const std::vector<kernels::ChunkCopy>& chunks;
    const std::vector<uint32_t>& slabs;
    const std::vector<uint8_t*>& flats;
    uint64_t chunk_bytes;
  };
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
  // dma store with relays held, its pieces cut (CopyThroughStagingMultipath
  // cuts them, builds the plan and calls it): batch by batch, one gather
  // into this GPU's `regions` regions of `per_batch` chunks, then each
  // piece to L1 over its path.
  Status StoreThroughStagingMultipath(const LayerAddresses& addresses,
                                      const std::vector<CopyStep>& steps,
                                      const std::vector<CopyPiece>& pieces, size_t per_batch,
                                      size_t regions, const StagedCopy& request,
                                      const CopySignal* signal,
                                      const std::function<bool(size_t, size_t)>& expired,
                                      size_t* stopped_at);
  // A store's piece through relay h, once this GPU's `region` holds it
  // (region_ready_): over NVLink into a region of the relay's staging
  // (once its previous bytes went to L1), then to L1 on the relay's host
  // stream; freed(region) marks the end of its NVLink copies. Returns on
  // this lane's GPU.
  Status StoreOnRelay(HeldRelay& h, const CopyPiece& piece, const std::vector<RelayCopy>& copies,
                      const StagedCopy& request, size_t region, size_t piece_index);
  // Waits on the CPU for everything enqueued on h, then never uses it again.
  void Abandon(HeldRelay& h, const Status& why);
  // The kernel stream waits for the ends of the held relays' streams, so
  // that Drain covers them (abandoning a relay where that fails).
  void JoinRelays();
  // Gives the held relays back once nothing of theirs is in flight
  // (drained: the lane's wait, which covers them, succeeded).
  void ReleaseRelays(bool drained);
  // Waits, sleeping, for everything enqueued on both streams since `start`.
  Status Drain(uint64_t bytes, std::chrono::steady_clock::time_point start);
  // Sleeps through the shortest time the copy can take, then polls done_.
  Status Poll(uint64_t bytes, std::chrono::steady_clock::time_point start);

  const Options options_;
  cuda::Stream kernel_stream_;
  cuda::Stream copy_stream_;
  static constexpr size_t kMaxRegions = 16;
  cuda::Event region_ready_[kMaxRegions];  // spin events: only streams wait on them
  cuda::Event region_free_[kMaxRegions];
  cuda::Event kernels_done_;
  cuda::Event started_;  // timing: where a Copy's GPU work begins
  cuda::Event done_;     // blocking, timing: the lane thread sleeps on it
  // The highest copy bandwidth measured so far (poll): never overestimating
  // a copy's time, the lane never sleeps past its end. 40 GB/s at first.
  double bytes_per_ns_ = 40;
  cuda::DeviceBuffer staging_;  // dma mode only
  CopyPlan plan_;               // one per request, all its steps
  RegistrationCache<LayerAddresses> addresses_{64};
  LaneTrace trace_;
  size_t traced_steps_ = 0;
  std::atomic<uint64_t> plan_bytes_{0};
  uint32_t max_ctas_ = 0;        // grid cap of the kernels (direct mode); 0: none
  Relays relays_;                // set before the first Copy
  std::vector<HeldRelay> held_;  // during a retrieve only
  std::atomic<uint64_t> multipath_copies_{0};
};

}  // namespace kvstash::backends
