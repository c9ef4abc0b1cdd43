// The path choice of multi-path retrieves.
#include "multipath_policy.h"

#include <algorithm>

namespace kvstash::server {

std::vector<size_t> ChooseRelays(const MultipathPolicy& policy, uint64_t bytes, size_t sub_batches,
                                 const std::vector<RelayCandidate>& candidates) {
  std::vector<size_t> chosen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RelayCandidate& c = candidates[i];
    if (c.linked && c.available && c.queued_bytes <= policy.idle_bytes) chosen.push_back(i);
  }
  // Paths are limited by the sub-batches to share, the bytes each must
  // carry and the cap; the own link is always one of them.
  size_t paths = std::min(chosen.size() + 1, std::max<size_t>(1, policy.max_paths));
  paths = std::min(paths, std::max<size_t>(1, sub_batches));
  if (policy.min_path_bytes > 0)
    paths = std::min<uint64_t>(paths, std::max<uint64_t>(1, bytes / policy.min_path_bytes));
  chosen.resize(paths - 1);
  return chosen;
}

std::vector<size_t> AssignSubBatches(size_t sub_batches, size_t paths) {
  std::vector<size_t> path(sub_batches, 0);
  if (paths <= 1) return path;
  for (size_t b = 0; b < sub_batches; ++b) path[b] = b % paths;
  return path;
}

size_t ChunksPerSubBatch(size_t chunks, size_t per_region, size_t paths) {
  per_region = std::max<size_t>(1, per_region);
  if (paths <= 1) return per_region;
  const size_t share = std::max<size_t>(1, (chunks + paths - 1) / paths);
  return std::min(per_region, share);
}

}  // namespace kvstash::server
