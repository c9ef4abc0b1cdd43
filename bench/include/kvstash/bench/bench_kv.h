// The synthetic engine's paged KV memory for the host backend: every layer in
// one HostKvMemory, each laid out like vLLM's flash-attn NHD cache
// [2, num_blocks, block_tokens, kv_heads, head_dim].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvstash/client_types.h"
#include "kvstash/host_memory.h"

namespace kvstash::bench {

struct KvShape {
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  DType dtype = DType::kBF16;
  uint32_t block_tokens = 16;
  uint32_t num_blocks = 0;
};

// Mismatches found by a check: how many rows, and the first one in words.
struct Mismatches {
  uint64_t rows = 0;
  std::string first;
};

// Owns the memory; not thread-safe.
class SyntheticKv {
 public:
  static Result<SyntheticKv> Create(const KvShape& shape);

  const LayerGeometry& geometry() const { return geometry_; }
  uint64_t size_bytes() const { return memory_.size(); }
  // Bytes of one token across every layer, K and V.
  uint64_t token_bytes() const;
  // One HostShm allocation, layer l at l * layer_bytes.
  RegisterOptions Registration(const std::string& model) const;

  // Writes the pattern of positions [0, n) of a prompt; position p lives in
  // block block_table[p / block_tokens].
  void Fill(const int32_t* tokens, size_t n, const uint32_t* block_table);
  // Fills every row of the given blocks with kPoisonByte.
  void Poison(const uint32_t* block_table, size_t num_blocks);
  // Positions [begin, end) must hold the pattern of their tokens.
  void CheckPattern(const int32_t* tokens, size_t begin, size_t end, const uint32_t* block_table,
                    Mismatches& found) const;
  // Positions [begin, end) must still hold poison.
  void CheckPoison(size_t begin, size_t end, const uint32_t* block_table, Mismatches& found) const;

 private:
  SyntheticKv(KvShape shape, LayerGeometry geometry, uint64_t layer_bytes, HostKvMemory memory)
      : shape_(shape), geometry_(geometry), layer_bytes_(layer_bytes), memory_(std::move(memory)) {}

  uint8_t* Row(uint32_t layer, uint32_t block, uint32_t kv, uint32_t token_in_block,
               uint32_t head) const;

  KvShape shape_;
  LayerGeometry geometry_;
  uint64_t layer_bytes_;
  HostKvMemory memory_;
};

}  // namespace kvstash::bench
