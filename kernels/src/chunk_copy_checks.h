// Argument checks shared by the CPU twins and the CUDA launchers: what a copy
// call can verify cheaply. Block id ranges are not among them: the caller
// checks those against num_blocks once per request, off the hot loop.
#pragma once

#include <cstddef>

#include "kvstash/kernels/chunk_copy.h"
#include "kvstash/status.h"

namespace kvstash::kernels::internal {

// Shape agrees with geometry, counts are positive, layer bases are present.
Status CheckGroup(const GroupCopy& group);

// Every chunk has a flat buffer, at most chunk_tokens tokens and enough block
// ids for them.
Status CheckChunks(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);

}  // namespace kvstash::kernels::internal
