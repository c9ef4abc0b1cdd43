// The KV memory of a simulated engine on the host backend: layers in POSIX
// shared memory, filled with bytes that are a function of (seed, layer, kv,
// token position, token id, head, byte), so that any process can check what a
// retrieve wrote without seeing what was stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/host_memory.h"

namespace kvstash::testing {

struct EngineShape {
  uint32_t num_layers = 4;
  uint32_t num_heads = 2;
  uint32_t head_bytes = 128;  // 64 bf16
  uint32_t block_tokens = 16;
  uint32_t num_blocks = 256;
  DType dtype = DType::kBF16;
};

class EngineKv {
 public:
  // vLLM flash-attn NHD per layer: [2, num_blocks, block_tokens, heads, head].
  static Result<EngineKv> Create(const EngineShape& shape);

  RegisterOptions Registration(const std::string& model, const std::string& tenant = "") const;
  const EngineShape& shape() const { return shape_; }
  uint8_t* Row(uint32_t layer, uint32_t kv, uint32_t block, uint32_t slot, uint32_t head) const;

  // Writes the pattern of tokens[0:n] into block_table's blocks.
  void Fill(uint64_t seed, const std::vector<int32_t>& tokens,
            const std::vector<uint32_t>& block_table);
  // Poisons every byte of the given blocks.
  void Poison(const std::vector<uint32_t>& blocks, uint8_t value = 0xCD);
  // Counts rows of tokens [from, to) that do not hold the pattern.
  uint64_t CountMismatches(uint64_t seed, const std::vector<int32_t>& tokens,
                           const std::vector<uint32_t>& block_table, size_t from, size_t to) const;
  // Counts rows of tokens [from, to) that are not all `value`.
  uint64_t CountNotPoison(const std::vector<uint32_t>& block_table, size_t from, size_t to,
                          uint8_t value = 0xCD) const;

 private:
  EngineKv(EngineShape shape, HostKvMemory memory) : shape_(shape), memory_(std::move(memory)) {}
  void Pattern(uint64_t seed, uint32_t layer, uint32_t kv, size_t position, int32_t token,
               uint32_t head, uint8_t* out) const;
  EngineShape shape_;
  HostKvMemory memory_;
};

// Token ids of a synthetic prompt: `shared` tokens common to every prompt of
// a family, then tokens unique to `prompt`.
std::vector<int32_t> PromptTokens(uint32_t prompt, size_t length, size_t shared);
std::vector<uint32_t> Blocks(uint32_t first, uint32_t count);

}  // namespace kvstash::testing
