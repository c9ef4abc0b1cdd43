// Filling, poisoning and checking the synthetic engine's KV blocks.
#include "kvstash/bench/bench_kv.h"

#include <cstring>
#include <vector>

#include "kvstash/bench/bench_pattern.h"
#include "kvstash/geometry_check.h"
#include "kvstash/layouts.h"

namespace kvstash::bench {

Result<SyntheticKv> SyntheticKv::Create(const KvShape& shape) {
  const LayerGeometry g =
      VllmFlashNhdGeometry(shape.num_blocks, shape.block_tokens, shape.kv_heads,
                           shape.head_dim * DTypeBytes(shape.dtype), shape.dtype);
  KVSTASH_RETURN_IF_ERROR(ValidateGeometry(g));
  const uint64_t layer_bytes = g.kv_stride * g.kv_count;
  auto memory = HostKvMemory::Create(layer_bytes * shape.layers);
  if (!memory.ok()) return memory.status();
  return SyntheticKv(shape, g, layer_bytes, std::move(memory.value()));
}

uint64_t SyntheticKv::token_bytes() const {
  return uint64_t{shape_.layers} * geometry_.kv_count * geometry_.num_heads * geometry_.head_bytes;
}

RegisterOptions SyntheticKv::Registration(const std::string& model) const {
  RegisterOptions options;
  options.model = model;
  options.allocations.push_back(memory_.handle());
  for (uint32_t l = 0; l < shape_.layers; ++l) {
    options.layers.push_back(LayerDesc{0, l * layer_bytes_, geometry_});
  }
  return options;
}

uint8_t* SyntheticKv::Row(uint32_t layer, uint32_t block, uint32_t kv, uint32_t token_in_block,
                          uint32_t head) const {
  return memory_.data() + layer * layer_bytes_ +
         PagedOffset(geometry_, block, kv, token_in_block, head);
}

void SyntheticKv::Fill(const int32_t* tokens, size_t n, const uint32_t* block_table) {
  const uint32_t bt = geometry_.block_tokens;
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (uint32_t kv = 0; kv < geometry_.kv_count; ++kv) {
      for (size_t p = 0; p < n; ++p) {
        for (uint32_t head = 0; head < geometry_.num_heads; ++head) {
          PatternRow({layer, kv, tokens[p], uint32_t(p), head},
                     Row(layer, block_table[p / bt], kv, uint32_t(p % bt), head),
                     geometry_.head_bytes);
        }
      }
    }
  }
}

void SyntheticKv::Poison(const uint32_t* block_table, size_t num_blocks) {
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (uint32_t kv = 0; kv < geometry_.kv_count; ++kv) {
      for (size_t b = 0; b < num_blocks; ++b) {
        // A block of one (layer, kv) is contiguous in NHD.
        std::memset(Row(layer, block_table[b], kv, 0, 0), kPoisonByte, geometry_.block_stride);
      }
    }
  }
}

void SyntheticKv::CheckPattern(const int32_t* tokens, size_t begin, size_t end,
                               const uint32_t* block_table, Mismatches& found) const {
  const uint32_t bt = geometry_.block_tokens;
  std::vector<uint8_t> expected(geometry_.head_bytes);
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (uint32_t kv = 0; kv < geometry_.kv_count; ++kv) {
      for (size_t p = begin; p < end; ++p) {
        for (uint32_t head = 0; head < geometry_.num_heads; ++head) {
          const RowId id{layer, kv, tokens[p], uint32_t(p), head};
          PatternRow(id, expected.data(), expected.size());
          const uint8_t* row = Row(layer, block_table[p / bt], kv, uint32_t(p % bt), head);
          if (std::memcmp(row, expected.data(), expected.size()) == 0) continue;
          if (found.rows++ == 0) {
            size_t i = 0;
            while (row[i] == expected[i]) ++i;
            found.first = "layer " + std::to_string(layer) + (kv ? " V" : " K") + " position " +
                          std::to_string(p) + " head " + std::to_string(head) + " byte " +
                          std::to_string(i) + ": " + std::to_string(row[i]) + ", expected " +
                          std::to_string(expected[i]) +
                          (row[i] == kPoisonByte ? " (never written)" : "");
          }
        }
      }
    }
  }
}

void SyntheticKv::CheckPoison(size_t begin, size_t end, const uint32_t* block_table,
                              Mismatches& found) const {
  const uint32_t bt = geometry_.block_tokens;
  for (uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (uint32_t kv = 0; kv < geometry_.kv_count; ++kv) {
      for (size_t p = begin; p < end; ++p) {
        for (uint32_t head = 0; head < geometry_.num_heads; ++head) {
          const uint8_t* row = Row(layer, block_table[p / bt], kv, uint32_t(p % bt), head);
          for (uint32_t i = 0; i < geometry_.head_bytes; ++i) {
            if (row[i] == kPoisonByte) continue;
            if (found.rows++ == 0) {
              found.first = "layer " + std::to_string(layer) + (kv ? " V" : " K") + " position " +
                            std::to_string(p) + " head " + std::to_string(head) + " byte " +
                            std::to_string(i) + " was written but lies outside what was retrieved";
            }
            break;
          }
        }
      }
    }
  }
}

}  // namespace kvstash::bench
