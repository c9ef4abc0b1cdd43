// Text and JSON reports of a bench run.
#include "kvstash/bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kvstash/bench/human_bytes.h"

namespace kvstash::bench {

namespace {

double GBps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
double Ratio(uint64_t part, uint64_t whole) { return whole ? double(part) / whole : 0; }

std::string Format(const char* format, double a, double b = 0) {
  char text[96];
  std::snprintf(text, sizeof(text), format, a, b);
  return text;
}

}  // namespace

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  // Nearest rank: the smallest value with at least a fraction q at or below it.
  const size_t rank = std::max<size_t>(1, size_t(std::ceil(q * double(values.size()))));
  const size_t index = std::min(rank, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

std::string BenchText(const BenchConfig& config, const BenchResults& r) {
  const KvShape& s = config.shape;
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    out += "  " + key + std::string(key.size() < 24 ? 24 - key.size() : 1, ' ') + value + "\n";
  };
  out += "kvstash bench: " + config.backend + " backend, model " + config.model + "\n";
  line("layout", std::to_string(s.layers) + " layers x " + std::to_string(s.kv_heads) +
                     " kv heads x " + std::to_string(s.head_dim) + " head dim " + NameOf(s.dtype) +
                     ", " + std::to_string(s.block_tokens) + " tokens/block, " +
                     std::to_string(r.num_blocks) + " blocks");
  line("chunk", std::to_string(r.chunk_tokens) + " tokens, " + HumanBytes(r.chunk_bytes));
  line("prompts", std::to_string(config.prompts) + " x " + std::to_string(config.prompt_tokens) +
                      " tokens, shared prefix " + std::to_string(config.shared_prefix_tokens) +
                      ", " + std::to_string(config.rounds) + " round(s)");
  line("phase", config.phase + ", seed " + std::to_string(config.seed));
  line("chunks stored", std::to_string(r.chunks_stored));
  line("chunks already present", std::to_string(r.chunks_already_present));
  if (r.chunks_skipped_no_room)
    line("chunks skipped (no room)", std::to_string(r.chunks_skipped_no_room));
  line("lookup hit rate",
       Format("%.1f%% of chunks", 100 * Ratio(r.hit_chunks, r.lookup_chunks)) + " (" +
           std::to_string(r.hit_chunks) + "/" + std::to_string(r.lookup_chunks) + "), " +
           Format("%.1f%% of tokens", 100 * Ratio(r.hit_tokens, r.lookup_tokens)) + " (" +
           std::to_string(r.hit_tokens) + "/" + std::to_string(r.lookup_tokens) + ")");
  if (r.daemon_counters_read)
    line("evicted (daemon)", std::to_string(r.daemon_evicted_chunks) + " chunks");
  const std::string shortfall = HitShortfallReason(r);
  if (!shortfall.empty()) {
    line("why not 100%",
         Format("hit rate %.0f%%: ", 100 * Ratio(r.hit_chunks, r.lookup_chunks)) + shortfall);
  }
  if (r.chunks_missing) line("chunks missing", std::to_string(r.chunks_missing));
  line("store", Format("%.2f GB/s", GBps(r.bytes_stored, r.store_seconds)) + " (" +
                    HumanBytes(r.bytes_stored) + Format(" in %.3f s)", r.store_seconds));
  line("retrieve", Format("%.2f GB/s", GBps(r.bytes_retrieved, r.retrieve_seconds)) + " (" +
                       HumanBytes(r.bytes_retrieved) + Format(" in %.3f s)", r.retrieve_seconds));
  line("lookup latency", Format("p50 %.3f ms, p99 %.3f ms", Percentile(r.lookup_ms, 0.5),
                                Percentile(r.lookup_ms, 0.99)));
  line("retrieve latency", Format("p50 %.3f ms, p99 %.3f ms", Percentile(r.retrieve_ms, 0.5),
                                  Percentile(r.retrieve_ms, 0.99)));
  if (r.verified) {
    line("verified", std::to_string(r.tokens_verified) + " tokens (" +
                         HumanBytes(double(r.tokens_verified) * r.token_bytes) + "), " +
                         std::to_string(r.mismatches.rows) + " mismatched rows");
    if (r.mismatches.rows) line("first mismatch", r.mismatches.first);
  } else {
    line("verified", "no (--verify off)");
  }
  for (const std::string& error : r.errors) line("error", error);
  out += r.passed() ? "PASS\n" : "FAIL\n";
  return out;
}

nlohmann::ordered_json BenchJson(const BenchConfig& config, const BenchResults& r) {
  const KvShape& s = config.shape;
  return {
      {"config",
       {{"backend", config.backend},
        {"model", config.model},
        {"layers", s.layers},
        {"kv_heads", s.kv_heads},
        {"head_dim", s.head_dim},
        {"dtype", NameOf(s.dtype)},
        {"block_tokens", s.block_tokens},
        {"num_blocks", r.num_blocks},
        {"chunk_tokens", r.chunk_tokens},
        {"chunk_bytes", r.chunk_bytes},
        {"prompts", config.prompts},
        {"prompt_tokens", config.prompt_tokens},
        {"shared_prefix_tokens", config.shared_prefix_tokens},
        {"rounds", config.rounds},
        {"seed", config.seed},
        {"phase", config.phase}}},
      {"store",
       {{"chunks_stored", r.chunks_stored},
        {"chunks_already_present", r.chunks_already_present},
        {"chunks_skipped_no_room", r.chunks_skipped_no_room},
        {"chunks_failed", r.chunks_store_failed},
        {"bytes", r.bytes_stored},
        {"seconds", r.store_seconds},
        {"gb_per_s", GBps(r.bytes_stored, r.store_seconds)}}},
      {"lookup",
       {{"chunks", r.lookup_chunks},
        {"hit_chunks", r.hit_chunks},
        {"tokens", r.lookup_tokens},
        {"hit_tokens", r.hit_tokens},
        {"chunk_hit_rate", Ratio(r.hit_chunks, r.lookup_chunks)},
        {"every_chunk_expected", r.every_chunk_expected},
        {"token_hit_rate", Ratio(r.hit_tokens, r.lookup_tokens)},
        {"p50_ms", Percentile(r.lookup_ms, 0.5)},
        {"p99_ms", Percentile(r.lookup_ms, 0.99)},
        {"shortfall_reason", HitShortfallReason(r)}}},
      {"daemon",
       {{"counters_read", r.daemon_counters_read},
        {"evicted_chunks", r.daemon_evicted_chunks},
        {"cleared_chunks", r.daemon_cleared_chunks},
        {"leases_expired", r.daemon_leases_expired}}},
      {"retrieve",
       {{"chunks_retrieved", r.chunks_retrieved},
        {"chunks_missing", r.chunks_missing},
        {"chunks_failed", r.chunks_retrieve_failed},
        {"bytes", r.bytes_retrieved},
        {"seconds", r.retrieve_seconds},
        {"gb_per_s", GBps(r.bytes_retrieved, r.retrieve_seconds)},
        {"p50_ms", Percentile(r.retrieve_ms, 0.5)},
        {"p99_ms", Percentile(r.retrieve_ms, 0.99)}}},
      {"verify",
       {{"enabled", r.verified},
        {"tokens", r.tokens_verified},
        {"mismatched_rows", r.mismatches.rows},
        {"first_mismatch", r.mismatches.first}}},
      {"errors", r.errors},
      {"pass", r.passed()},
  };
}

}  // namespace kvstash::bench
