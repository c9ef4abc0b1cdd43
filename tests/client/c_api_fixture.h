// The fixture of the C API's integration tests: a private kvstashd (host
// backend), one POSIX shared-memory region standing for an engine's KV cache
// (NHD layers of [2, 64 blocks, 16 tokens, 2 heads, 64 bytes], filled with a
// pattern, never zeros), and a C client connected to the daemon. Each test
// owns its fixture; not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "c_geometry.h"
#include "daemon_process.h"
#include "kvstash/host_memory.h"
#include "kvstash/kvstash.h"
#include "kvstash/layouts.h"

namespace kvstash::testing {

inline constexpr uint32_t kBlocks = 64, kBlockTokens = 16, kHeads = 2, kHeadBytes = 64;
inline constexpr uint64_t kBlockBytes = uint64_t{kBlockTokens} * kHeads * kHeadBytes;
inline constexpr uint64_t kLayerBytes = 2 * kBlocks * kBlockBytes;

inline kvstash_geometry Geometry() {
  return ToCGeometry(VllmFlashNhdGeometry(kBlocks, kBlockTokens, kHeads, kHeadBytes, DType::kBF16));
}

class CApiTest : public ::testing::Test {
 protected:
  // `layers` layers side by side in the shared memory; the daemon cuts
  // prompts into chunks of `chunk_tokens`.
  CApiTest(uint32_t chunk_tokens, uint32_t layers, const char* client_name)
      : chunk_tokens_(chunk_tokens), layers_(layers), client_name_(client_name) {}

  void SetUp() override {
    auto daemon = DaemonProcess::Start({"--chunk-tokens", std::to_string(chunk_tokens_), "--l1-gb",
                                        "0.03125", "--l1-slice-mb", "4"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(daemon.value());
    auto memory = HostKvMemory::Create(layers_ * kLayerBytes);
    ASSERT_TRUE(memory.ok());
    memory_ = std::make_unique<HostKvMemory>(std::move(memory.value()));
    for (uint64_t i = 0; i < memory_->size(); ++i) memory_->data()[i] = uint8_t(i * 13 + (i >> 9));
    kvstash_options options{};
    options.socket = daemon_->socket().c_str();
    options.timeout_ms = 10000;  // far above what any call here may take
    options.client_name = client_name_;
    ASSERT_EQ(kvstash_connect(&options, &client_), KVSTASH_OK) << kvstash_last_error(client_);
  }
  void TearDown() override { kvstash_close(client_); }

  // Registers every layer of the shared memory through `client` (default
  // client_): a registration belongs to the connection that made it.
  static constexpr const char* kModel = "c-api-model";
  kvstash_registration Register(const char* model = kModel, kvstash_client* client = nullptr) {
    if (client == nullptr) client = client_;
    kvstash_allocation allocation{};
    allocation.kind = KVSTASH_ALLOCATION_SHM;
    allocation.shm_name = memory_->name().c_str();
    allocation.size_bytes = memory_->size();
    std::vector<kvstash_layer> layers;
    for (uint32_t l = 0; l < layers_; ++l) layers.push_back({0, l * kLayerBytes, Geometry()});
    kvstash_register_options options{};
    options.model = model;
    options.allocations = &allocation;
    options.num_allocations = 1;
    options.layers = layers.data();
    options.num_layers = layers.size();
    kvstash_registration reg{};
    EXPECT_EQ(kvstash_register(client, &options, &reg), KVSTASH_OK) << kvstash_last_error(client);
    return reg;
  }

  const uint32_t chunk_tokens_;
  const uint32_t layers_;
  const char* const client_name_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<HostKvMemory> memory_;
  kvstash_client* client_ = nullptr;
};

}  // namespace kvstash::testing
