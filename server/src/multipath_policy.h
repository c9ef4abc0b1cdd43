// Which GPUs carry a retrieve into one GPU, and which sub-batch goes where.
// Plain C++ over the topology and the per-link queues (LinkLoads), so that
// the choice is tested everywhere, without a GPU.
//
// A relay is another GPU that reaches the target over NVLink with peer
// access. It carries whole sub-batches of the retrieve over its own PCIe
// link (host -> its staging -> NVLink -> the target's staging, in dma
// mode). It is used only while its own retrieve lane holds no more than
// `idle_bytes` (queued or in flight) and no other retrieve holds it: the
// retrieves of a GPU that loads for its own engine never share its link
// with a peer's, and when every GPU loads at once each uses its own link.
// A request too small to repay the relay's fixed costs (an NVLink copy and
// a cross-GPU wait per sub-batch) stays on one path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvstash::server {

struct MultipathPolicy {
  // A relay whose own retrieve lane holds more bytes than this is busy.
  uint64_t idle_bytes = 0;
  // Each path carries at least this many bytes, or fewer paths are used.
  uint64_t min_path_bytes = 2 << 20;
  size_t max_paths = 8;  // the target's own link included
};

// A GPU that could help, as the target's lane sees it right now.
struct RelayCandidate {
  int device = 0;
  bool linked = false;        // NVLink and peer access both ways with the target
  bool available = false;     // not failed, not held by another retrieve
  uint64_t queued_bytes = 0;  // its own retrieve lane: queued + in flight
};

// The candidates (indices into `candidates`) that carry part of a retrieve
// of `sub_batches` sub-batches and `bytes` bytes, in the order given;
// empty: the target's own link alone.
std::vector<size_t> ChooseRelays(const MultipathPolicy& policy, uint64_t bytes, size_t sub_batches,
                                 const std::vector<RelayCandidate>& candidates);

// The path of each sub-batch for `paths` paths (0: the target's own link,
// p: the p-th chosen relay): round robin from the own link, whose first
// sub-batch lands soonest (no NVLink hop) and so starts the scatters.
std::vector<size_t> AssignSubBatches(size_t sub_batches, size_t paths);

// Chunks per sub-batch when `paths` paths share `chunks` chunks whose own
// sub-batch would be `per_region` chunks: small enough that every path gets
// at least one sub-batch.
size_t ChunksPerSubBatch(size_t chunks, size_t per_region, size_t paths);

}  // namespace kvstash::server
