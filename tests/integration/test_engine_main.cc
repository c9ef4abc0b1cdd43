// kvstash_test_engine: a simulated engine process for integration tests.
//   --role store:  registers, fills its blocks with the pattern of each
//                  prompt and stores it.
//   --role verify: registers the same model, looks each prompt up (it must be
//                  wholly stored), retrieves it into poisoned blocks and
//                  checks every byte. Exit 1 on any miss or mismatch.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "engine_kv.h"

using namespace kvstash;
using namespace kvstash::testing;

int main(int argc, char** argv) {
  CLI::App app{"kvstash integration-test engine"};
  std::string socket, role = "store", model = "test-model";
  uint32_t first = 0, prompts = 8, prompt_tokens = 200, shared = 0;
  uint64_t seed = 0x5eed;
  app.add_option("--socket", socket)->required();
  app.add_option("--role", role)->check(CLI::IsMember({"store", "verify"}));
  app.add_option("--model", model);
  app.add_option("--first-prompt", first);
  app.add_option("--prompts", prompts);
  app.add_option("--prompt-tokens", prompt_tokens);
  app.add_option("--shared-tokens", shared);
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  ClientOptions options;
  options.socket = socket;
  options.request_timeout = std::chrono::seconds(30);
  auto client = Client::Connect(options);
  if (!client.ok())
    return std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str()), 1;
  auto engine = EngineKv::Create(EngineShape{});
  if (!engine.ok())
    return std::fprintf(stderr, "engine: %s\n", engine.status().ToString().c_str()), 1;
  auto reg = (*client)->RegisterKV(engine->Registration(model)).get();
  if (!reg.ok()) return std::fprintf(stderr, "register: %s\n", reg.status().ToString().c_str()), 1;

  const uint32_t blocks_per_prompt = (prompt_tokens + 15) / 16;
  uint32_t done = 0;
  for (uint32_t p = first; p < first + prompts; ++p) {
    const auto tokens = PromptTokens(p, prompt_tokens, shared);
    const auto blocks = Blocks((p - first) % 8 * blocks_per_prompt, blocks_per_prompt);
    auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), blocks.data(), blocks.size());
    if (!chunks.ok())
      return std::fprintf(stderr, "chunks: %s\n", chunks.status().ToString().c_str()), 1;
    if (role == "store") {
      engine->Fill(seed, tokens, blocks);
      auto outcomes = (*client)->Store(reg->id, *chunks).get();
      if (!outcomes.ok())
        return std::fprintf(stderr, "store: %s\n", outcomes.status().ToString().c_str()), 1;
      for (const ChunkOutcome& o : *outcomes) {
        if (o.result != ChunkResult::kStored && o.result != ChunkResult::kAlreadyPresent) {
          return std::fprintf(stderr, "prompt %u: chunk %s\n", p, NameOf(o.result)), 1;
        }
      }
    } else {
      std::vector<ChunkKey> keys;
      for (const auto& c : *chunks) keys.push_back(c.key);
      auto hit = (*client)->Lookup(reg->id, keys).get();
      if (!hit.ok() || hit->hit_tokens != prompt_tokens) {
        return std::fprintf(stderr, "prompt %u: lookup found %llu of %u tokens\n", p,
                            hit.ok() ? (unsigned long long)hit->hit_tokens : 0ull, prompt_tokens),
               1;
      }
      engine->Poison(blocks);
      auto got = (*client)->Retrieve(reg->id, *chunks, 0, hit->lease_id).get();
      if (!got.ok())
        return std::fprintf(stderr, "retrieve: %s\n", got.status().ToString().c_str()), 1;
      const uint64_t bad = engine->CountMismatches(seed, tokens, blocks, 0, tokens.size());
      if (bad != 0)
        return std::fprintf(stderr, "prompt %u: %llu rows differ\n", p, (unsigned long long)bad), 1;
    }
    ++done;
  }
  std::printf("%s %u prompts\n", role == "store" ? "stored" : "verified", done);
  return 0;
}
