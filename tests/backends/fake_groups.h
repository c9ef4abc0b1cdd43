// A registration's groups over fake engine addresses (never dereferenced):
// what the copy planners cut into steps and pieces, without an engine.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kvstash/backends/backend.h"
#include "kvstash/chunk_layout.h"

namespace kvstash::backends {

struct FakeGroups {
  ChunkLayout layout;
  std::vector<GroupAddresses> groups;
};

// Layer l's base is 4096 * (l + 1).
inline FakeGroups MakeFakeGroups(const std::vector<LayerGeometry>& layers, uint32_t chunk_tokens) {
  Result<ChunkLayout> layout = ChunkLayout::Build(layers, chunk_tokens);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  FakeGroups out{*layout, {}};
  for (const ChunkGroup& group : layout->groups()) {
    GroupAddresses a;
    for (uint32_t l : group.layers)
      a.layer_bases.push_back(reinterpret_cast<uint8_t*>(4096 * (l + 1)));
    a.group = kernels::GroupCopy{group.geometry, group.shape, group.offset_bytes, nullptr};
    out.groups.push_back(std::move(a));
  }
  for (GroupAddresses& a : out.groups) a.group.layer_bases = a.layer_bases.data();
  return out;
}

}  // namespace kvstash::backends
