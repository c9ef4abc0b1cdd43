// The bytes a retrieve must leave in engine memory, predicted on the host by
// the kernels' CPU twins: the storer's blocks gathered into flat chunks, then
// scattered over the reader's memory from skip_tokens on.
#pragma once

#include <string>
#include <vector>

#include "device_kv.h"
#include "kvstash/client.h"

namespace kvstash::testing {

// Applies to `reader` (host twin of the reader's memory) what retrieving
// `retrieved` after `stored` was stored from `storer` must write.
Status ApplyExpectedRetrieve(const RegisteredKv& registration, const GpuLayout& layout,
                             HostAllocations& storer, const std::vector<ChunkBlocks>& stored,
                             HostAllocations& reader, const std::vector<ChunkBlocks>& retrieved,
                             uint32_t skip_tokens);

// Empty when equal; otherwise how many bytes differ and where the first is.
std::string CompareAllocations(const HostAllocations& actual, const HostAllocations& expected);

}  // namespace kvstash::testing
