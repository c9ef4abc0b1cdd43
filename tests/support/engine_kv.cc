// Simulated engine KV memory and its byte pattern.
#include "engine_kv.h"

#include <cstring>

#include "kvstash/layouts.h"

namespace kvstash::testing {

namespace {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Result<EngineKv> EngineKv::Create(const EngineShape& s) {
  const uint64_t layer_bytes = 2ull * s.num_blocks * s.block_tokens * s.num_heads * s.head_bytes;
  Result<HostKvMemory> memory = HostKvMemory::Create(layer_bytes * s.num_layers);
  if (!memory.ok()) return memory.status();
  return EngineKv(s, std::move(*memory));
}

RegisterOptions EngineKv::Registration(const std::string& model, const std::string& tenant) const {
  const EngineShape& s = shape_;
  const LayerGeometry g =
      VllmFlashNhdGeometry(s.num_blocks, s.block_tokens, s.num_heads, s.head_bytes, s.dtype);
  RegisterOptions options;
  options.model = model;
  options.tenant_salt = tenant;
  options.allocations.push_back(memory_.handle());
  for (uint32_t l = 0; l < s.num_layers; ++l) {
    options.layers.push_back(LayerDesc{0, l * LayerExtentBytes(g), g});
  }
  return options;
}

uint8_t* EngineKv::Row(uint32_t layer, uint32_t kv, uint32_t block, uint32_t slot,
                       uint32_t head) const {
  const EngineShape& s = shape_;
  const uint64_t head_stride = s.head_bytes, token = head_stride * s.num_heads;
  const uint64_t block_stride = token * s.block_tokens, kv_stride = block_stride * s.num_blocks;
  return memory_.data() + layer * 2 * kv_stride + kv * kv_stride + block * block_stride +
         slot * token + head * head_stride;
}

void EngineKv::Pattern(uint64_t seed, uint32_t layer, uint32_t kv, size_t position, int32_t token,
                       uint32_t head, uint8_t* out) const {
  uint64_t state = seed ^ (uint64_t(layer) << 48) ^ (uint64_t(kv) << 40) ^
                   (uint64_t(position) << 20) ^ (uint64_t(uint32_t(token)) * 0x100000001B3ull) ^
                   (uint64_t(head) << 56);
  for (uint32_t b = 0; b < shape_.head_bytes; b += 8) {
    const uint64_t v = SplitMix(state);
    std::memcpy(out + b, &v, std::min<uint32_t>(8, shape_.head_bytes - b));
  }
}

void EngineKv::Fill(uint64_t seed, const std::vector<int32_t>& tokens,
                    const std::vector<uint32_t>& table) {
  const EngineShape& s = shape_;
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (uint32_t l = 0; l < s.num_layers; ++l)
      for (uint32_t k = 0; k < 2; ++k)
        for (uint32_t h = 0; h < s.num_heads; ++h)
          Pattern(seed, l, k, t, tokens[t], h,
                  Row(l, k, table[t / s.block_tokens], uint32_t(t % s.block_tokens), h));
  }
}

void EngineKv::Poison(const std::vector<uint32_t>& blocks, uint8_t value) {
  const EngineShape& s = shape_;
  for (uint32_t block : blocks)
    for (uint32_t l = 0; l < s.num_layers; ++l)
      for (uint32_t k = 0; k < 2; ++k)
        std::memset(Row(l, k, block, 0, 0), value,
                    uint64_t(s.block_tokens) * s.num_heads * s.head_bytes);
}

uint64_t EngineKv::CountMismatches(uint64_t seed, const std::vector<int32_t>& tokens,
                                   const std::vector<uint32_t>& table, size_t from,
                                   size_t to) const {
  const EngineShape& s = shape_;
  std::vector<uint8_t> expected(s.head_bytes);
  uint64_t mismatches = 0;
  for (size_t t = from; t < to; ++t)
    for (uint32_t l = 0; l < s.num_layers; ++l)
      for (uint32_t k = 0; k < 2; ++k)
        for (uint32_t h = 0; h < s.num_heads; ++h) {
          Pattern(seed, l, k, t, tokens[t], h, expected.data());
          const uint8_t* row =
              Row(l, k, table[t / s.block_tokens], uint32_t(t % s.block_tokens), h);
          mismatches += std::memcmp(row, expected.data(), s.head_bytes) != 0;
        }
  return mismatches;
}

uint64_t EngineKv::CountNotPoison(const std::vector<uint32_t>& table, size_t from, size_t to,
                                  uint8_t value) const {
  const EngineShape& s = shape_;
  uint64_t changed = 0;
  for (size_t t = from; t < to; ++t)
    for (uint32_t l = 0; l < s.num_layers; ++l)
      for (uint32_t k = 0; k < 2; ++k)
        for (uint32_t h = 0; h < s.num_heads; ++h) {
          const uint8_t* row =
              Row(l, k, table[t / s.block_tokens], uint32_t(t % s.block_tokens), h);
          for (uint32_t b = 0; b < s.head_bytes; ++b) {
            if (row[b] != value) {
              ++changed;
              break;
            }
          }
        }
  return changed;
}

std::vector<int32_t> PromptTokens(uint32_t prompt, size_t length, size_t shared) {
  std::vector<int32_t> tokens(length);
  for (size_t i = 0; i < length; ++i) {
    tokens[i] = i < shared ? int32_t(1000 + i) : int32_t(prompt * 100003 + i * 7 + 1);
  }
  return tokens;
}

std::vector<uint32_t> Blocks(uint32_t first, uint32_t count) {
  std::vector<uint32_t> blocks(count);
  for (uint32_t i = 0; i < count; ++i) blocks[i] = first + i;
  return blocks;
}

}  // namespace kvstash::testing
