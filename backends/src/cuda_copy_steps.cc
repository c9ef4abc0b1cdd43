// Steps of a copy lane's request.
#include "cuda_copy_steps.h"

#include <algorithm>

namespace kvstash::backends {

std::vector<std::pair<uint64_t, uint64_t>> FlatWindows(
    const std::vector<GroupAddresses>& groups,
    const std::vector<std::pair<uint32_t, uint32_t>>& slices) {
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (size_t g = 0; g < slices.size(); ++g) {
    if (slices[g].second == 0) continue;
    const uint64_t layer_bytes = FlatLayerBytes(groups[g].group.shape);
    const uint64_t lo = groups[g].group.flat_offset_bytes + slices[g].first * layer_bytes;
    windows.emplace_back(lo, lo + slices[g].second * layer_bytes);
  }
  return windows;
}

std::vector<CopyStep> CopySteps(const std::vector<GroupAddresses>& groups,
                                const CopySignal* signal) {
  std::vector<CopyStep> steps;
  const size_t num_groups = groups.size();
  if (signal != nullptr && !signal->ranges.empty()) {
    // Ranges in steps of 1, 1, 2, 4, ... ranges: a step's copy takes about
    // as long as everything before it, and its slots go after its scatter.
    size_t r = 0, done = 0;
    while (r < signal->ranges.size()) {
      CopyStep& step = steps.emplace_back();
      step.slices.assign(num_groups, {0, 0});
      const size_t want = std::max<size_t>(1, done);
      size_t taken = 0;
      for (; r < signal->ranges.size() && taken < want; ++r, ++taken) {
        const auto& slices = signal->ranges[r];
        // A range whose layers do not continue the step's starts a new one.
        bool adjacent = true;
        for (size_t g = 0; g < num_groups && g < slices.size(); ++g) {
          const auto [first, count] = slices[g];
          const auto [have_first, have_count] = step.slices[g];
          if (count > 0 && have_count > 0 && first != have_first + have_count) adjacent = false;
        }
        if (!adjacent && taken > 0) break;
        for (size_t g = 0; g < num_groups && g < slices.size(); ++g) {
          const auto [first, count] = slices[g];
          if (count == 0) continue;
          auto& have = step.slices[g];
          if (have.second == 0) have.first = first;
          have.second += count;
        }
        if (r < signal->range_slots.size()) step.slots.push_back(signal->range_slots[r]);
      }
      done += taken;
    }
  } else {
    CopyStep& all = steps.emplace_back();
    for (const GroupAddresses& g : groups) all.slices.emplace_back(0, g.group.shape.num_layers);
    if (signal != nullptr && !signal->range_slots.empty())
      all.slots.push_back(signal->range_slots[0]);
  }
  if (steps.size() > 1) {
    for (CopyStep& step : steps) step.windows = FlatWindows(groups, step.slices);
  }
  return steps;
}

}  // namespace kvstash::backends
