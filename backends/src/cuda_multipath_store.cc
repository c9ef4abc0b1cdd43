// Multi-path dma stores of one copy lane: each batch gathered once into this
// GPU's staging, its pieces then carried to L1 by this GPU's own link and by
// the relays held (each pulls its pieces over NVLink into its own staging,
// then copies them to L1 over its PCIe link).
//
// Ordering, all enqueued by this lane thread, each event recorded before
// any stream waits for it:
//   this GPU   kernel stream: [wait region_free(reg) and every relay's
//              freed(reg)] gather -> record region_ready(reg)
//              copy stream: wait region_ready(reg) -> own pieces to L1 ->
//              record region_free(reg)
//   a relay    link stream: [wait landed(r)] wait region_ready(reg) ->
//              NVLink copy (a hop) -> record pulled(r) ... -> record
//              freed(reg), then landed(r) on the host stream once the host
//              stream, waiting pulled(r) before each hop's copy, wrote L1.
// Join (before the lane drains) makes the kernel stream wait for the end of
// every relay's streams, so the copy returns only once every byte is in L1.
#include <cuda_runtime_api.h>

#include "cuda_multipath_copy.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

// A relay keeps a `freed` event for each region of this GPU's staging.
static_assert(CudaRelayPath::kMaxRegions >= CudaLaneCore::kMaxRegions);

Status CudaMultipathCopy::GatherStoreBatch(const LayerAddresses& addresses, const Cut& cut,
                                           const PieceBatch& batch) {
  cudaStream_t kernels = lane_.kernel_stream();
  const size_t reg = batch.region;
  if (batch.refill) {
    // The region is gathered into again only once every path has taken
    // the bytes of its previous batch out of it. An abandoned relay's
    // streams were synchronised.
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, lane_.region_free(reg), 0));
    for (const HeldRelay& h : held_) {
      if (!h.path->failed())
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, h.path->freed(reg), 0));
    }
  }
  // One gather for the batch: its pieces are windows of the same chunks.
  KVSTASH_RETURN_IF_ERROR(lane_.Launch(addresses, cut.steps[batch.step].slices, batch.begin,
                                       batch.end - batch.begin, batch.first));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane_.region_ready(reg), kernels));
  return Status::Ok();
}

Status CudaMultipathCopy::SendStoreBatch(Cut& cut, const PieceBatch& batch,
                                         const StagedCopy& request) {
  cudaStream_t copies = lane_.copy_stream();
  const size_t reg = batch.region;
  // A relay whose own engine started saving gets no further piece: its
  // own stores queue behind no more of ours.
  UpdateUsable(cut);
  // The first batch's relay pieces go in hops: the relay's host copy
  // then starts after the first hop, not after the whole piece.
  const bool in_hops = batch.batch == 0 && batch.step == 0;
  bool copies_waited = false;
  for (size_t k = 0; k < batch.count; ++k) {
    const CopyPiece& piece = cut.pieces[batch.first + k];
    const size_t p = LeastLoadedPath(cut.carried, cut.usable);
    cut.carried[p] += piece.bytes;
    if (p > 0) {
      HeldRelay& h = held_[p - 1];
      const Status through = StoreOnRelay(
          h, piece, RelayCopies(piece, request.chunk_bytes, in_hops, relays_.hop_bytes), request,
          reg, batch.first + k);
      if (through.ok()) continue;
      // Abandon waits for whatever it enqueued; this link copies the
      // piece (the same bytes again, where some landed) and the rest.
      Abandon(h, through);
      cut.usable[p] = false;
      cut.carried[p] -= piece.bytes;
      cut.carried[0] += piece.bytes;
    }
    // gather -> ready -> D2H copy of this piece's windows.
    if (!copies_waited) {
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, lane_.region_ready(reg), 0));
      copies_waited = true;
    }
    KVSTASH_RETURN_IF_ERROR(lane_.CopySlots(request.chunks, request.slabs, request.flats,
                                            piece.begin, piece.end, request.chunk_bytes,
                                            batch.first + k, piece.windows));
  }
  // This link's copies out of the region are done after this (the
  // relays' are marked by their freed(reg)).
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane_.region_free(reg), copies));
  return Status::Ok();
}

Status CudaMultipathCopy::StoreOnRelay(HeldRelay& h, const CopyPiece& piece,
                                       const std::vector<RelayCopy>& copies,
                                       const StagedCopy& request, size_t region,
                                       size_t piece_index) {
  const int device = lane_.options().device;
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
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, lane_.region_ready(region), 0));
    const size_t rows = piece.end - piece.begin;
    uint8_t* const staged = path.staging() + r * h.region_bytes;
    const uint8_t* const source = request.flats[piece.begin];
    for (const RelayCopy& c : copies) {
      if (rows == 1) {
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(staged + c.packed, path.device(),
                                                         source + c.lo, device, c.width, link));
      } else {
        // Rows a chunk apart in this GPU's staging, `width` apart there.
        cudaMemcpy3DPeerParms copy{};
        copy.srcPtr =
            cudaPitchedPtr{const_cast<uint8_t*>(source) + c.lo, request.chunk_bytes, c.width, rows};
        copy.srcDevice = device;
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
  const Status back = cuda::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!sent.ok()) return sent;
  if (!back.ok()) return back;
  h.bytes += piece.bytes;
  return Status::Ok();
}

}  // namespace kvstash::backends
