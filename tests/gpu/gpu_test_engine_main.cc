// kvstash_gpu_test_engine: an engine process for the GPU end-to-end tests.
// Its KV lives in cudaMalloc memory of a named layout, filled with random
// bytes, registered through kvstash/cuda_memory.h.
//   --role store:  stores one prompt from blocks of the store block table.
//   --role verify: poisons the blocks of another block table, looks the
//                  prompt up, retrieves it there (skipping --skip-tokens) and
//                  compares every byte of its memory with what the kernels'
//                  CPU twins predict. Exit 1 on any difference.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "device_kv.h"
#include "engine_kv.h"
#include "expected_retrieve.h"
#include "layouts.h"

using namespace kvstash;
using namespace kvstash::testing;

namespace {

int Fail(const char* what, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvstash GPU test engine"};
  std::string socket, role = "store", layout_name = "vllm_nhd", model = "gpu-test";
  uint32_t prompt_tokens = 200, skip_tokens = 0;
  uint64_t store_seed = 11, reader_seed = 22;
  app.add_option("--socket", socket)->required();
  app.add_option("--role", role)->check(CLI::IsMember({"store", "verify"}));
  app.add_option("--layout", layout_name);
  app.add_option("--model", model);
  app.add_option("--prompt-tokens", prompt_tokens);
  app.add_option("--skip-tokens", skip_tokens);
  app.add_option("--store-seed", store_seed);
  app.add_option("--reader-seed", reader_seed);
  CLI11_PARSE(app, argc, argv);
  const bool store = role == "store";

  Result<GpuLayout> layout = FindGpuLayout(layout_name);
  if (!layout.ok()) return Fail("layout", layout.status());
  ClientOptions options;
  options.socket = socket;
  options.request_timeout = std::chrono::seconds(60);
  auto client = Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  Result<DeviceKv> kv = DeviceKv::Create(*layout, store ? store_seed : reader_seed);
  if (!kv.ok()) return Fail("allocate", kv.status());
  RegisterOptions registration;
  registration.model = model;
  if (Status s = AddCudaLayers(kv->Layers(), registration); !s.ok()) return Fail("share", s);
  auto reg = (*client)->RegisterKV(registration).get();
  if (!reg.ok()) return Fail("register", reg.status());

  const std::vector<int32_t> tokens = PromptTokens(7, prompt_tokens, 0);
  const uint32_t needed = (prompt_tokens + reg->block_tokens - 1) / reg->block_tokens;
  // Different blocks, in a scrambled order, on each side.
  const std::vector<uint32_t> store_blocks =
      kernels::test::RandomBlocks(layout->num_blocks(), needed, 1);
  const std::vector<uint32_t> reader_blocks =
      kernels::test::RandomBlocks(layout->num_blocks(), needed, 2);
  auto chunks_of = [&](const std::vector<uint32_t>& blocks) {
    return PromptChunks(*reg, tokens.data(), tokens.size(), blocks.data(), blocks.size());
  };
  auto stored = chunks_of(store_blocks);
  auto retrieved = chunks_of(reader_blocks);
  if (!stored.ok() || !retrieved.ok())
    return Fail("chunks", stored.ok() ? retrieved.status() : stored.status());

  if (store) {
    auto outcomes = (*client)->Store(reg->id, *stored).get();
    if (!outcomes.ok()) return Fail("store", outcomes.status());
    for (size_t i = 0; i < outcomes->size(); ++i) {
      const ChunkOutcome& o = (*outcomes)[i];
      if (o.result != ChunkResult::kStored) {
        std::fprintf(stderr, "chunk %zu: %s %s\n", i, NameOf(o.result), o.error.ToString().c_str());
        return 1;
      }
    }
    std::printf("stored %zu chunks\n", outcomes->size());
  } else {
    if (Status s = kv->Poison(reader_blocks, 0xCD); !s.ok()) return Fail("poison", s);
    std::vector<ChunkKey> keys;
    for (const ChunkBlocks& c : *retrieved) keys.push_back(c.key);
    auto hit = (*client)->Lookup(reg->id, keys).get();
    if (!hit.ok()) return Fail("lookup", hit.status());
    if (hit->hit_tokens != prompt_tokens) {
      std::fprintf(stderr, "lookup found %llu of %u tokens\n", (unsigned long long)hit->hit_tokens,
                   prompt_tokens);
      return 1;
    }
    auto outcomes = (*client)->Retrieve(reg->id, *retrieved, skip_tokens, hit->lease_id).get();
    if (!outcomes.ok()) return Fail("retrieve", outcomes.status());
    for (size_t i = 0; i < outcomes->size(); ++i) {
      const ChunkOutcome& o = (*outcomes)[i];
      if (o.result != ChunkResult::kRetrieved) {
        std::fprintf(stderr, "chunk %zu: %s %s\n", i, NameOf(o.result), o.error.ToString().c_str());
        return 1;
      }
    }
    Result<HostAllocations> actual = kv->Download();
    if (!actual.ok()) return Fail("download", actual.status());
    HostAllocations storer = DeviceKv::HostBytes(*layout, store_seed);
    if (Status s = ApplyExpectedRetrieve(*reg, *layout, storer, *stored, kv->twin(), *retrieved,
                                         skip_tokens);
        !s.ok()) {
      return Fail("expectation", s);
    }
    const std::string difference = CompareAllocations(*actual, kv->twin());
    if (!difference.empty()) {
      std::fprintf(stderr, "retrieved memory differs from the CPU twin: %s\n", difference.c_str());
      return 1;
    }
    uint64_t bytes = 0;
    for (const auto& a : *actual) bytes += a.size();
    std::printf("verified %zu chunks, %llu bytes equal\n", outcomes->size(),
                (unsigned long long)bytes);
  }
  if (Status s = (*client)->UnregisterKV(reg->id).get(); !s.ok()) return Fail("unregister", s);
  return 0;
}
