// Multi-path dma stores of one copy lane: each batch gathered once into this
// GPU's staging, its pieces then carried to L1 by this GPU's own link and by
// the relays held (each pulls its pieces over NVLink into its own staging,
// then copies them to L1 over its PCIe link).
//
// Ordering, all enqueued by this lane thread, each event recorded before
// any stream waits for it:
//   this GPU   kernel stream: [wait region_free_[reg] and every relay's
//              freed(reg)] gather -> record region_ready_[reg]
//              copy stream: wait region_ready_[reg] -> own pieces to L1 ->
//              record region_free_[reg]
//   a relay    link stream: [wait landed(r)] wait region_ready_[reg] ->
//              NVLink copy (a hop) -> record pulled(r) ... -> record
//              freed(reg), then landed(r) on the host stream once the host
//              stream, waiting pulled(r) before each hop's copy, wrote L1.
// JoinRelays (before Drain) makes the kernel stream wait for the end of
// every relay's streams, so the copy returns only once every byte is in L1.
#include <cuda_runtime_api.h>

#include "cuda_copy_lane.h"
#include "cuda_relay_path.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

Status CudaCopyLane::StoreThroughStagingMultipath(
    const LayerAddresses& addresses, const std::vector<CopyStep>& steps,
    const std::vector<CopyPiece>& pieces, size_t per_batch, size_t regions,
    const StagedCopy& request, const CopySignal* signal,
    const std::function<bool(size_t, size_t)>& expired, size_t* stopped_at) {
  // A relay keeps a `freed` event for each region of this GPU's staging.
  static_assert(CudaRelayPath::kMaxRegions >= kMaxRegions);
  const size_t paths = 1 + held_.size();
  cudaStream_t kernels = kernel_stream_.get();
  cudaStream_t copies = copy_stream_.get();
  std::vector<uint64_t> carried(paths, 0);  // bytes each path took so far
  std::vector<bool> usable(paths, true);
  const std::vector<std::vector<PieceBatch>> batches =
      PieceBatches(pieces, steps.size(), request.chunks.size(), per_batch, regions);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const PieceBatch& batch : batches[s]) {
      if (expired(batch.begin, batch.end)) {  // enqueue no batch past a deadline
        *stopped_at = s == 0 ? batch.begin : 0;
        return Status::Ok();
      }
      const size_t reg = batch.region;
      if (batch.refill) {
        // The region is gathered into again only once every path has taken
        // the bytes of its previous batch out of it. An abandoned relay's
        // streams were synchronised.
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, region_free_[reg].get(), 0));
        for (const HeldRelay& h : held_) {
          if (!h.path->failed())
            KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, h.path->freed(reg), 0));
        }
      }
      // One gather for the batch: its pieces are windows of the same chunks.
      KVSTASH_RETURN_IF_ERROR(
          Launch(addresses, steps[s].slices, batch.begin, batch.end - batch.begin, batch.first));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(region_ready_[reg].get(), kernels));
      // A relay whose own engine started saving gets no further piece: its
      // own stores queue behind no more of ours.
      for (size_t p = 1; p < paths; ++p) usable[p] = usable[p] && RelayUsable(held_[p - 1]);
      // The first batch's relay pieces go in hops: the relay's host copy
      // then starts after the first hop, not after the whole piece.
      const bool in_hops = batch.batch == 0 && s == 0;
      bool copies_waited = false;
      for (size_t k = 0; k < batch.count; ++k) {
        const CopyPiece& piece = pieces[batch.first + k];
        const size_t p = LeastLoadedPath(carried, usable);
        carried[p] += piece.bytes;
        if (p > 0) {
          HeldRelay& h = held_[p - 1];
          const Status through = StoreOnRelay(
              h, piece, RelayCopies(piece, request.chunk_bytes, in_hops, relays_.hop_bytes),
              request, reg, batch.first + k);
          if (through.ok()) continue;
          // Abandon waits for whatever it enqueued; this link copies the
          // piece (the same bytes again, where some landed) and the rest.
          Abandon(h, through);
          usable[p] = false;
          carried[p] -= piece.bytes;
          carried[0] += piece.bytes;
        }
        // gather -> ready -> D2H copy of this piece's windows.
        if (!copies_waited) {
          KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, region_ready_[reg].get(), 0));
          copies_waited = true;
        }
        KVSTASH_RETURN_IF_ERROR(CopySlots(request.chunks, request.slabs, request.flats, piece.begin,
                                          piece.end, request.chunk_bytes, batch.first + k,
                                          piece.windows));
      }
      // This link's copies out of the region are done after this (the
      // relays' are marked by their freed(reg)).
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(region_free_[reg].get(), copies));
    }
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaCopyLane::StoreOnRelay(HeldRelay& h, const CopyPiece& piece,
                                  const std::vector<RelayCopy>& copies, const StagedCopy& request,
                                  size_t region, size_t piece_index) {
  CudaRelayPath& path = *h.path;
  if (h.regions == 0 || piece.bytes > h.region_bytes || copies.empty())
    return Status::Internal("no room for the piece in the relay's staging");
  const Status sent = [&]() -> Status {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
    if (relays_.fault) KVSTASH_RETURN_IF_ERROR(relays_.fault(path.device(), piece_index));
    cudaStream_t link = path.link_stream();
    cudaStream_t host = path.host_stream();
    const size_t r = h.used % h.regions;
    // The relay's region r is refilled only once its last bytes reached L1.
    if (h.used >= h.regions)
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, path.landed(r), 0));
    ++h.used;
    // The piece is in this GPU's staging once the batch's gather ran.
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, region_ready_[region].get(), 0));
    const size_t rows = piece.end - piece.begin;
    uint8_t* const staged = path.staging() + r * h.region_bytes;
    const uint8_t* const source = request.flats[piece.begin];
    for (const RelayCopy& c : copies) {
      if (rows == 1) {
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(
            staged + c.packed, path.device(), source + c.lo, options_.device, c.width, link));
      } else {
        // Rows a chunk apart in this GPU's staging, `width` apart there.
        cudaMemcpy3DPeerParms copy{};
        copy.srcPtr =
            cudaPitchedPtr{const_cast<uint8_t*>(source) + c.lo, request.chunk_bytes, c.width, rows};
        copy.srcDevice = options_.device;
        copy.dstPtr = cudaPitchedPtr{staged + c.packed, c.width, c.width, rows};
        copy.dstDevice = path.device();
        copy.extent = cudaExtent{c.width, rows, 1};
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy3DPeerAsync(&copy, link));
      }
      // To L1 once it crossed. A wait takes the event's latest record: one
      // event serves every hop.
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(path.pulled(r), link));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(host, path.pulled(r), 0));
      KVSTASH_RETURN_IF_ERROR(CopyOnRelayLink(h, r, piece, c, request));
    }
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(path.freed(region), link));
    return cuda::CudaStatus(cudaEventRecord(path.landed(r), host), "cudaEventRecord(landed)");
  }();
  // Back on this lane's GPU whatever happened there: its launches need it.
  const Status back = cuda::CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice");
  if (!sent.ok()) return sent;
  if (!back.ok()) return back;
  h.bytes += piece.bytes;
  return Status::Ok();
}

}  // namespace kvstash::backends
