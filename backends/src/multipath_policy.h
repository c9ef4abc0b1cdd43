// Which GPUs carry a retrieve into one GPU, or a store out of it. Plain C++
// over the topology and the per-link queues (LinkLoads), so that the choice
// is tested everywhere, without a GPU; how the copy is then cut between them
// is multipath_split.h's.
//
// A relay is another GPU that reaches the target over NVLink with peer
// access. It carries pieces of the copy over its own PCIe link (dma mode:
// a retrieve host -> its staging -> NVLink -> the target's staging, a store
// the reverse). It is taken only while its own lane of the same direction
// holds no more than `idle_bytes` (queued or in flight) and no other copy
// of that direction holds it, and the lane gives it no further piece once
// its own queue fills: the copies of a GPU that loads (or saves) for its
// own engine never wait behind a peer's pieces queued after theirs, and
// when every GPU copies at once each uses its own link. PCIe is full
// duplex: a relay's store direction is judged apart from its retrieve
// direction. A request too small to repay the relays' fixed costs (an
// NVLink copy and a cross-GPU wait per piece) takes fewer paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvstash::backends {

struct MultipathPolicy {
  // A relay whose own lane of the copy's direction holds more bytes than
  // this is busy.
  uint64_t idle_bytes = 0;
  // Each path carries at least this many bytes, or fewer paths are used.
  uint64_t min_path_bytes = 2 << 20;
  size_t max_paths = 8;  // the target's own link included
};

// A GPU that could help, as the target's lane sees it right now.
struct RelayCandidate {
  int device = 0;
  bool linked = false;        // NVLink and peer access both ways with the target
  bool available = false;     // not failed, not held by another copy of its direction
  uint64_t queued_bytes = 0;  // its own lane of that direction: queued + in flight
};

// Whether a relay whose own lane of the copy's direction holds
// `queued_bytes` may carry (more of) another GPU's copy.
inline bool RelayIdle(const MultipathPolicy& policy, uint64_t queued_bytes) {
  return queued_bytes <= policy.idle_bytes;
}

// The candidates (indices into `candidates`) that carry part of a copy
// of `bytes` bytes that can be cut into at most `max_shares` parts (its
// chunks times its layers), in the order given; empty: the target's own
// link alone.
std::vector<size_t> ChooseRelays(const MultipathPolicy& policy, uint64_t bytes, size_t max_shares,
                                 const std::vector<RelayCandidate>& candidates);

}  // namespace kvstash::backends
