// How a CUDA copy lane cuts one request into steps: layer ranges copied and
// scattered together, each step's board slots written after its scatter.
// Plain C++ (no CUDA types), so that it is tested everywhere.
//
//   layer-wise retrieve  the ranges in steps of 1, 1, 2, 4, ... ranges: the
//                        first range is usable after its own copy, and a
//                        step's copy takes about as long as everything
//                        before it, so 60 or 80 ranges cost ~8 steps, not 80
//                        copies and launches with their fixed costs;
//   otherwise            one step of every layer. (Cutting a one-sub-batch
//                        retrieve in two by layers, so that the first
//                        piece's scatter runs while the second arrives, was
//                        measured on an H100: the copies slowed more than the
//                        scatter hid, and a 1-chunk retrieve ended 8-15 us
//                        later; bench/history/2026-11-22.md.)
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kvstash/backends/backend.h"

namespace kvstash::backends {

struct CopyStep {
  // slices[g]: the (first, count) of group g's layers in this step.
  std::vector<std::pair<uint32_t, uint32_t>> slices;
  // Its bytes inside a flat chunk, one window per group with layers; empty
  // when the request is a single step (the whole chunk).
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  std::vector<uint32_t> slots;  // board slots written after it
};

std::vector<CopyStep> CopySteps(const std::vector<GroupAddresses>& groups,
                                const CopySignal* signal);

// The byte windows of `slices` inside a flat chunk, one per group with
// layers: a group's layers are consecutive in the flat format.
std::vector<std::pair<uint64_t, uint64_t>> FlatWindows(
    const std::vector<GroupAddresses>& groups,
    const std::vector<std::pair<uint32_t, uint32_t>>& slices);

}  // namespace kvstash::backends
