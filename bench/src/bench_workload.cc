// The synthetic engine workload behind `kvstash bench`.
#include "kvstash/bench/bench_workload.h"

#include <chrono>
#include <map>

namespace kvstash::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxErrorsKept = 5;
constexpr uint32_t kVocabularySize = 128000;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Prompt p: the shared prefix (stream 0), then its own tokens (stream p + 1).
std::vector<std::vector<int32_t>> MakePrompts(const BenchConfig& config) {
  std::vector<std::vector<int32_t>> prompts(config.prompts);
  for (uint32_t p = 0; p < config.prompts; ++p) {
    prompts[p].resize(config.prompt_tokens);
    for (uint32_t i = 0; i < config.prompt_tokens; ++i) {
      const uint64_t stream = i < config.shared_prefix_tokens ? 0 : p + 1;
      prompts[p][i] = int32_t(Mix(Mix(config.seed) ^ Mix(stream << 32 | i)) % kVocabularySize);
    }
  }
  return prompts;
}

Status CheckConfig(const BenchConfig& config, const ServerInfo& server) {
  if (config.backend != "host") {
    return Status::InvalidArgument("--backend " + config.backend +
                                   " is not supported yet; only host");
  }
  if (!server.backend.empty() && server.backend != config.backend) {
    return Status::InvalidArgument("kvstashd runs the " + server.backend + " backend; --backend " +
                                   config.backend +
                                   " needs a daemon started with the same backend");
  }
  if (config.prompts == 0 || config.prompt_tokens == 0 || config.rounds == 0) {
    return Status::InvalidArgument("--prompts, --prompt-tokens and --rounds must be positive");
  }
  if (config.shared_prefix_tokens > config.prompt_tokens) {
    return Status::InvalidArgument(
        "--shared-prefix-tokens " + std::to_string(config.shared_prefix_tokens) +
        " exceeds --prompt-tokens " + std::to_string(config.prompt_tokens));
  }
  if (config.shape.block_tokens == 0)
    return Status::InvalidArgument("--block-tokens must be positive");
  if (config.phase != "both" && config.phase != "store" && config.phase != "retrieve") {
    return Status::InvalidArgument("--phase " + config.phase +
                                   " is not one of store, retrieve, both");
  }
  return Status::Ok();
}

// Unregisters when the workload ends, however it ends.
class RegistrationScope {
 public:
  RegistrationScope(Client& client, uint64_t id) : client_(client), id_(id) {}
  ~RegistrationScope() { (void)client_.UnregisterKV(id_).get(); }
  RegistrationScope(const RegistrationScope&) = delete;
  RegistrationScope& operator=(const RegistrationScope&) = delete;

 private:
  Client& client_;
  uint64_t id_;
};

class Workload {
 public:
  Workload(Client& client, const BenchConfig& config, SyntheticKv& kv, const RegisteredKv& reg)
      : client_(client),
        config_(config),
        kv_(kv),
        reg_(reg),
        blocks_per_prompt_((config.prompt_tokens + reg.block_tokens - 1) / reg.block_tokens) {
    for (uint32_t j = 0; j < blocks_per_prompt_; ++j) {
      source_.push_back(j);
      // Other blocks, in reverse order, so that a retrieve that wrote where
      // the prompt was stored (or in order) would show.
      destination_.push_back(2 * blocks_per_prompt_ - 1 - j);
    }
    results_.chunk_tokens = reg.chunk_tokens;
    results_.chunk_bytes = reg.chunk_bytes;
    results_.num_blocks = kv.geometry().num_blocks;
    results_.token_bytes = kv.token_bytes();
    results_.verified = config.verify;
  }

  Result<BenchResults> Run() {
    const auto prompts = MakePrompts(config_);
    const bool store = config_.phase != "retrieve";
    const bool retrieve = config_.phase != "store";
    results_.every_chunk_expected = config_.phase == "retrieve";
    for (uint32_t round = 0; round < config_.rounds; ++round) {
      if (store) {
        for (const auto& prompt : prompts) KVSTASH_RETURN_IF_ERROR(Store(prompt));
      }
      if (retrieve) {
        for (const auto& prompt : prompts) KVSTASH_RETURN_IF_ERROR(LookupAndRetrieve(prompt));
      }
    }
    return std::move(results_);
  }

 private:
  void NoteError(const std::string& what, const Status& error) {
    if (results_.errors.size() < kMaxErrorsKept)
      results_.errors.push_back(what + ": " + error.ToString());
  }

  Status Store(const std::vector<int32_t>& tokens) {
    kv_.Fill(tokens.data(), tokens.size(), source_.data());
    auto chunks = PromptChunks(reg_, tokens.data(), tokens.size(), source_.data(), source_.size());
    if (!chunks.ok()) return chunks.status();
    const auto start = Clock::now();
    auto outcomes = client_.Store(reg_.id, *chunks).get();
    results_.store_seconds += MillisSince(start) / 1000;
    if (!outcomes.ok()) return outcomes.status();
    for (size_t i = 0; i < outcomes->size(); ++i) {
      const ChunkOutcome& outcome = (*outcomes)[i];
      switch (outcome.result) {
        case ChunkResult::kStored:
          ++results_.chunks_stored;
          results_.bytes_stored += (*chunks)[i].num_tokens * results_.token_bytes;
          break;
        case ChunkResult::kAlreadyPresent: ++results_.chunks_already_present; break;
        case ChunkResult::kSkippedNoRoom: ++results_.chunks_skipped_no_room; break;
        default:
          ++results_.chunks_store_failed;
          NoteError("store chunk " + std::to_string(i) + " (" + NameOf(outcome.result) + ")",
                    outcome.error);
      }
    }
    return Status::Ok();
  }

  Status LookupAndRetrieve(const std::vector<int32_t>& tokens) {
    const std::vector<ChunkKey> keys = ChunkKeys(reg_, tokens.data(), tokens.size());
    auto start = Clock::now();
    auto hit = client_.Lookup(reg_.id, keys).get();
    results_.lookup_ms.push_back(MillisSince(start));
    if (!hit.ok()) return hit.status();
    results_.lookup_chunks += keys.size();
    results_.hit_chunks += hit->hit_chunks;
    results_.lookup_tokens += tokens.size();
    results_.hit_tokens += hit->hit_tokens;
    const size_t written_end = size_t(blocks_per_prompt_) * reg_.block_tokens;
    if (config_.verify) kv_.Poison(destination_.data(), destination_.size());
    if (hit->hit_chunks == 0) {
      if (config_.verify) kv_.CheckPoison(0, written_end, destination_.data(), results_.mismatches);
      return Status::Ok();
    }
    const size_t hit_tokens = std::min<size_t>(hit->hit_tokens, tokens.size());
    auto chunks =
        PromptChunks(reg_, tokens.data(), hit_tokens, destination_.data(), destination_.size());
    if (!chunks.ok()) return chunks.status();
    if (chunks->size() != hit->hit_chunks) {
      NoteError("lookup", Status::Internal(std::to_string(hit->hit_chunks) + " chunks hit but " +
                                           std::to_string(hit_tokens) + " tokens make " +
                                           std::to_string(chunks->size())));
      (void)client_.Release(hit->lease_id).get();
      return Status::Ok();
    }
    start = Clock::now();
    auto outcomes = client_.Retrieve(reg_.id, *chunks, 0, hit->lease_id).get();
    results_.retrieve_ms.push_back(MillisSince(start));
    results_.retrieve_seconds += results_.retrieve_ms.back() / 1000;
    if (!outcomes.ok()) return outcomes.status();
    const size_t chunk_tokens = reg_.chunk_tokens;
    for (size_t i = 0; i < outcomes->size(); ++i) {
      const ChunkOutcome& outcome = (*outcomes)[i];
      const size_t begin = i * chunk_tokens;
      size_t written = 0;
      if (outcome.result == ChunkResult::kRetrieved) {
        ++results_.chunks_retrieved;
        written = std::min<size_t>(outcome.num_tokens, chunk_tokens);
        results_.bytes_retrieved += written * results_.token_bytes;
        results_.tokens_verified += config_.verify ? written : 0;
      } else if (outcome.result == ChunkResult::kMissing) {
        ++results_.chunks_missing;
      } else {
        ++results_.chunks_retrieve_failed;
        NoteError("retrieve chunk " + std::to_string(i) + " (" + NameOf(outcome.result) + ")",
                  outcome.error);
      }
      if (config_.verify) {
        kv_.CheckPattern(tokens.data(), begin, begin + written, destination_.data(),
                         results_.mismatches);
        const size_t end = std::min(begin + chunk_tokens, written_end);
        kv_.CheckPoison(begin + written, end, destination_.data(), results_.mismatches);
      }
    }
    if (config_.verify) {
      const size_t after = std::min(outcomes->size() * chunk_tokens, written_end);
      kv_.CheckPoison(after, written_end, destination_.data(), results_.mismatches);
    }
    return Status::Ok();
  }

  Client& client_;
  const BenchConfig& config_;
  SyntheticKv& kv_;
  const RegisteredKv& reg_;
  const uint32_t blocks_per_prompt_;
  std::vector<uint32_t> source_;       // where prompts are filled and stored from
  std::vector<uint32_t> destination_;  // where they are retrieved to
  BenchResults results_;
};

// The daemon's counters by name; empty when Stats fails (an older daemon):
// the workload runs without them.
std::map<std::string, uint64_t> DaemonCounters(Client& client) {
  std::map<std::string, uint64_t> counters;
  auto stats = client.Stats().get();
  if (stats.ok()) counters.insert(stats->counters.begin(), stats->counters.end());
  return counters;
}

uint64_t Grew(const std::map<std::string, uint64_t>& before,
              const std::map<std::string, uint64_t>& after, const std::string& name) {
  const auto b = before.find(name);
  const auto a = after.find(name);
  if (a == after.end() || b == before.end() || a->second < b->second) return 0;
  return a->second - b->second;
}

}  // namespace

std::string HitShortfallReason(const BenchResults& r) {
  if (r.hit_chunks >= r.lookup_chunks) return "";
  std::vector<std::string> reasons;
  if (r.every_chunk_expected) {
    reasons.push_back(
        "--phase retrieve expects every chunk an earlier --phase store stored with "
        "the same --seed and shape (through L1, L2 or a shared L3); " +
        std::to_string(r.lookup_chunks - r.hit_chunks) + " were not found");
  }
  if (r.daemon_evicted_chunks) {
    reasons.push_back("the pool was full and " + std::to_string(r.daemon_evicted_chunks) +
                      " chunks were evicted (a larger kvstashd --l1-gb, or fewer --prompts, "
                      "keeps them)");
  }
  if (r.chunks_skipped_no_room) {
    reasons.push_back(std::to_string(r.chunks_skipped_no_room) +
                      " chunks were not stored for lack of room (every slot leased or in use)");
  }
  if (r.chunks_store_failed) {
    reasons.push_back(std::to_string(r.chunks_store_failed) + " chunk stores failed");
  }
  if (r.daemon_cleared_chunks) {
    reasons.push_back(std::to_string(r.daemon_cleared_chunks) +
                      " chunks were dropped by a Clear during the run");
  }
  if (reasons.empty()) {
    return r.daemon_counters_read
               ? "no evictions, skipped stores or clears were counted during the run"
               : "the daemon's counters could not be read to say why";
  }
  std::string out;
  for (size_t i = 0; i < reasons.size(); ++i) out += (i ? "; " : "") + reasons[i];
  return out;
}

Result<BenchResults> RunBench(Client& client, const BenchConfig& config) {
  KVSTASH_RETURN_IF_ERROR(CheckConfig(config, client.server_info()));
  KvShape shape = config.shape;
  const uint32_t blocks_per_prompt =
      (config.prompt_tokens + shape.block_tokens - 1) / shape.block_tokens;
  if (shape.num_blocks == 0) shape.num_blocks = 2 * blocks_per_prompt;
  if (shape.num_blocks < 2 * blocks_per_prompt) {
    return Status::InvalidArgument(
        "--num-blocks " + std::to_string(shape.num_blocks) + " is too few: a prompt of " +
        std::to_string(config.prompt_tokens) + " tokens needs " +
        std::to_string(blocks_per_prompt) + " blocks to store from and as many to retrieve into");
  }
  auto kv = SyntheticKv::Create(shape);
  if (!kv.ok()) return kv.status();
  auto reg = client.RegisterKV(kv->Registration(config.model)).get();
  if (!reg.ok()) return reg.status();
  RegistrationScope scope(client, reg->id);
  const auto before = DaemonCounters(client);
  Result<BenchResults> results = Workload(client, config, *kv, *reg).Run();
  if (!results.ok()) return results;
  const auto after = DaemonCounters(client);
  results->daemon_counters_read = !before.empty() && !after.empty();
  results->daemon_evicted_chunks = Grew(before, after, "evicted_chunks");
  results->daemon_cleared_chunks = Grew(before, after, "cleared_chunks");
  results->daemon_leases_expired = Grew(before, after, "leases_expired");
  return results;
}

}  // namespace kvstash::bench
