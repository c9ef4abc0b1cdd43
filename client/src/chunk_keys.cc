// Chunk keys and per-chunk block lists computed from a prompt (no I/O).
#include <algorithm>
#include <string>

#include "kvstash/client.h"

namespace kvstash {

std::vector<ChunkKey> ChunkKeys(const RegisteredKv& registration, const int32_t* tokens,
                                size_t num_tokens) {
  return ChainChunkKeys(registration.namespace_id, tokens, num_tokens, registration.chunk_tokens);
}

Result<std::vector<ChunkBlocks>> PromptChunks(const RegisteredKv& registration,
                                              const int32_t* tokens, size_t num_tokens,
                                              const uint32_t* block_table,
                                              size_t block_table_size) {
  const uint32_t block_tokens = registration.block_tokens;
  const uint32_t chunk_tokens = registration.chunk_tokens;
  if (block_tokens == 0 || chunk_tokens == 0 || chunk_tokens % block_tokens != 0) {
    return Status::InvalidArgument("registration " + std::to_string(registration.id) +
                                   " has no valid chunk_tokens/block_tokens");
  }
  const size_t blocks_needed = (num_tokens + block_tokens - 1) / block_tokens;
  if (block_table_size < blocks_needed) {
    return Status::InvalidArgument(std::to_string(num_tokens) + " tokens need " +
                                   std::to_string(blocks_needed) + " blocks of " +
                                   std::to_string(block_tokens) + " tokens, block table has " +
                                   std::to_string(block_table_size));
  }
  std::vector<ChunkKey> keys = ChunkKeys(registration, tokens, num_tokens);
  std::vector<ChunkBlocks> chunks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t first_token = i * chunk_tokens;
    const size_t chunk_len = std::min<size_t>(chunk_tokens, num_tokens - first_token);
    const size_t first_block = first_token / block_tokens;
    const size_t num_blocks = (chunk_len + block_tokens - 1) / block_tokens;
    chunks[i].key = keys[i];
    chunks[i].num_tokens = uint32_t(chunk_len);
    chunks[i].block_ids.assign(block_table + first_block, block_table + first_block + num_blocks);
  }
  return chunks;
}

}  // namespace kvstash
