// The path choice of multi-path copies.
#include "multipath_policy.h"

#include <algorithm>

namespace kvstash::backends {

std::vector<size_t> ChooseRelays(const MultipathPolicy& policy, uint64_t bytes, size_t max_shares,
                                 const std::vector<RelayCandidate>& candidates) {
  std::vector<size_t> chosen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RelayCandidate& c = candidates[i];
    if (c.linked && c.available && RelayIdle(policy, c.queued_bytes)) chosen.push_back(i);
  }
  // Paths are limited by the parts to share, the bytes each must carry
  // and the cap; the own link is always one of them.
  size_t paths = std::min(chosen.size() + 1, std::max<size_t>(1, policy.max_paths));
  paths = std::min(paths, std::max<size_t>(1, max_shares));
  if (policy.min_path_bytes > 0)
    paths = std::min<uint64_t>(paths, std::max<uint64_t>(1, bytes / policy.min_path_bytes));
  chosen.resize(paths - 1);
  return chosen;
}

}  // namespace kvstash::backends
