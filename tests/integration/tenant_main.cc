// kvstash_test_tenant: an engine of another OS user, for trust tests. Run as
// root, it drops to --uid/--gid first, then connects once and runs each
// action in order on that one connection, printing one line per action:
//   register-shm:NAME:SIZE  registers someone else's shared memory object
//   store-own:MODEL         registers its own memory and stores two chunks
//   clear                   Clear of every scope it may clear
//   describe                the Describe JSON
//   stats                   the Stats JSON
// Lines read "<action> <status code> <detail>".
#include <grp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

#include "engine_kv.h"

using namespace kvstash;
using namespace kvstash::testing;

int main(int argc, char** argv) {
  CLI::App app{"kvstash integration-test tenant"};
  std::string socket;
  int64_t uid = -1, gid = -1;
  std::vector<std::string> actions;
  app.add_option("--socket", socket)->required();
  app.add_option("--uid", uid);
  app.add_option("--gid", gid);
  app.add_option("actions", actions);
  CLI11_PARSE(app, argc, argv);
  if (gid >= 0 && (setgroups(0, nullptr) != 0 || setgid(gid_t(gid)) != 0))
    return std::perror("setgid"), 2;
  if (uid >= 0 && setuid(uid_t(uid)) != 0) return std::perror("setuid"), 2;

  ClientOptions options;
  options.socket = socket;
  options.request_timeout = std::chrono::seconds(10);
  auto client = Client::Connect(options);
  if (!client.ok()) return std::printf("connect %s\n", client.status().ToString().c_str()), 1;
  std::optional<EngineKv> engine;  // kept: its memory stays registered
  for (const std::string& action : actions) {
    const std::string verb = action.substr(0, action.find(':'));
    const std::string arg =
        action.find(':') == std::string::npos ? "" : action.substr(action.find(':') + 1);
    if (verb == "register-shm") {
      auto shape = EngineKv::Create(EngineShape{});
      if (!shape.ok()) return std::printf("engine %s\n", shape.status().ToString().c_str()), 1;
      RegisterOptions reg = shape->Registration("stolen");
      const size_t colon = arg.rfind(':');
      reg.allocations[0] = HostShm{arg.substr(0, colon), std::stoull(arg.substr(colon + 1))};
      auto got = (*client)->RegisterKV(reg).get();
      std::printf("%s %s %s\n", verb.c_str(), NameOf(got.status().code()),
                  got.status().message().c_str());
    } else if (verb == "store-own") {
      auto created = EngineKv::Create(EngineShape{});
      if (!created.ok()) return std::printf("engine %s\n", created.status().ToString().c_str()), 1;
      engine.emplace(std::move(*created));
      auto reg = (*client)->RegisterKV(engine->Registration(arg)).get();
      if (!reg.ok()) {
        std::printf("%s %s %s\n", verb.c_str(), NameOf(reg.status().code()),
                    reg.status().message().c_str());
        continue;
      }
      const auto tokens = PromptTokens(900, 128, 0);
      const auto blocks = Blocks(0, 8);
      engine->Fill(1, tokens, blocks);
      auto chunks = PromptChunks(*reg, tokens.data(), tokens.size(), blocks.data(), blocks.size());
      auto stored = (*client)->Store(reg->id, *chunks).get();
      size_t count = 0;
      if (stored.ok()) {
        for (const ChunkOutcome& o : *stored) count += o.result == ChunkResult::kStored;
      }
      std::printf("%s %s %zu\n", verb.c_str(), NameOf(stored.status().code()), count);
    } else if (verb == "clear") {
      auto cleared = (*client)->Clear().get();
      std::printf("%s %s %llu\n", verb.c_str(), NameOf(cleared.status().code()),
                  cleared.ok() ? static_cast<unsigned long long>(*cleared) : 0ull);
    } else if (verb == "describe") {
      auto text = (*client)->Describe().get();
      std::printf("%s %s %s\n", verb.c_str(), NameOf(text.status().code()),
                  text.ok() ? text->c_str() : text.status().message().c_str());
    } else if (verb == "stats") {
      auto stats = (*client)->Stats().get();
      std::printf("%s %s %s\n", verb.c_str(), NameOf(stats.status().code()),
                  stats.ok() ? stats->json.c_str() : stats.status().message().c_str());
    } else {
      std::printf("%s Unknown action\n", action.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
