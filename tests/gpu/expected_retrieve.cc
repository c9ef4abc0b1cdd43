// Host-side prediction of a retrieve.
#include "expected_retrieve.h"

#include <algorithm>

#include "kvstash/kernels/chunk_copy.h"

namespace kvstash::testing {

namespace {

std::vector<kernels::GroupCopy> Groups(const RegisteredKv& registration,
                                       const std::vector<uint8_t*>& layer_bases,
                                       std::vector<std::vector<uint8_t*>>& storage) {
  std::vector<kernels::GroupCopy> groups;
  storage.clear();
  storage.reserve(registration.groups.size());
  for (const ChunkGroup& g : registration.groups) {
    storage.emplace_back();
    for (uint32_t layer : g.layers) storage.back().push_back(layer_bases[layer]);
    groups.push_back({g.geometry, g.shape, g.offset_bytes, storage.back().data()});
  }
  return groups;
}

}  // namespace

Status ApplyExpectedRetrieve(const RegisteredKv& registration, const GpuLayout& layout,
                             HostAllocations& storer, const std::vector<ChunkBlocks>& stored,
                             HostAllocations& reader, const std::vector<ChunkBlocks>& retrieved,
                             uint32_t skip_tokens) {
  std::vector<std::vector<uint8_t*>> storer_storage, reader_storage;
  const auto from = Groups(registration, DeviceKv::LayerBases(layout, storer), storer_storage);
  const auto to = Groups(registration, DeviceKv::LayerBases(layout, reader), reader_storage);
  std::vector<uint8_t> flat(registration.chunk_bytes);
  for (size_t i = 0; i < std::min(stored.size(), retrieved.size()); ++i) {
    const uint32_t tokens = stored[i].num_tokens;
    const uint64_t first = uint64_t(i) * registration.chunk_tokens;
    const uint32_t skip =
        uint32_t(std::min<uint64_t>(tokens, skip_tokens > first ? skip_tokens - first : 0));
    std::fill(flat.begin(), flat.end(), 0xAB);
    const kernels::ChunkCopy gather{flat.data(), stored[i].block_ids.data(),
                                    uint32_t(stored[i].block_ids.size()), tokens, 0};
    const kernels::ChunkCopy scatter{flat.data(), retrieved[i].block_ids.data(),
                                     uint32_t(retrieved[i].block_ids.size()), tokens, skip};
    for (size_t g = 0; g < from.size(); ++g) {
      KVSTASH_RETURN_IF_ERROR(kernels::GatherChunksCpu(from[g], &gather, 1));
      KVSTASH_RETURN_IF_ERROR(kernels::ScatterChunksCpu(to[g], &scatter, 1));
    }
  }
  return Status::Ok();
}

std::string CompareAllocations(const HostAllocations& actual, const HostAllocations& expected) {
  if (actual.size() != expected.size()) return "allocation counts differ";
  for (size_t a = 0; a < actual.size(); ++a) {
    if (actual[a] == expected[a]) continue;
    if (actual[a].size() != expected[a].size())
      return "allocation " + std::to_string(a) + " sizes differ";
    size_t differing = 0, first = actual[a].size();
    for (size_t i = 0; i < actual[a].size(); ++i) {
      if (actual[a][i] != expected[a][i]) {
        ++differing;
        first = std::min(first, i);
      }
    }
    return "allocation " + std::to_string(a) + ": " + std::to_string(differing) + " of " +
           std::to_string(actual[a].size()) + " bytes differ, first at offset " +
           std::to_string(first) + " (" + std::to_string(actual[a][first]) + " != expected " +
           std::to_string(expected[a][first]) + ")";
  }
  return "";
}

}  // namespace kvstash::testing
