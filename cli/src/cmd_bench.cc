// `kvstash bench`: runs the synthetic engine workload (bench_workload.h)
// against kvstashd and reports throughput, hit rates, latency and PASS/FAIL.
#include <iostream>
#include <map>

#include "common.h"
#include "kvstash/bench/bench_report.h"
#include "kvstash/bench/bench_workload.h"
#include "kvstash/bench/tier_limits.h"
#if KVSTASH_HAVE_CUDA
#include "kvstash/bench/cuda_bench.h"
#endif

namespace kvstash::cli {

namespace {

// The workloads themselves live in kvstash::bench_core (bench/).
using bench::BenchConfig;
using bench::BenchResults;
#if KVSTASH_HAVE_CUDA
using bench::CudaBenchConfig;
using bench::CudaBenchResults;
#endif

// `kvstash bench tiers`: the tiers against their raw limits, no daemon.
struct TierBenchOptions {
  std::string l2_path;
  std::string l3_redis;
  std::string l3_user, l3_password;
  double chunk_mb = 8, value_mb = 32;
  uint32_t chunks = 128, rings = 2, depth = 8, pool_threads = 4, values = 32, connections = 4,
           runs = 3;
};

struct BenchOptions {
  BenchConfig config;
  TierBenchOptions tiers;
  std::string dtype = "bf16";
  std::vector<uint32_t> cuda_chunk_counts = {1, 4, 16, 64};
  int cuda_latency_samples = 1000;
  std::vector<std::string> cuda_layouts;
  int64_t cuda_in_step_at = 0;  // Unix ms; 0: the full bench
  double cuda_in_step_seconds = 3;
};

const std::map<std::string, DType>& DTypeNames() {
  static const std::map<std::string, DType> names = {
      {"bf16", DType::kBF16},     {"f16", DType::kF16},       {"fp16", DType::kF16},
      {"f32", DType::kF32},       {"fp32", DType::kF32},      {"fp8", DType::kF8E4M3},
      {"f8e4m3", DType::kF8E4M3}, {"f8e5m2", DType::kF8E5M2}, {"u8", DType::kU8},
      {"i8", DType::kI8},         {"int8", DType::kI8},
  };
  return names;
}

// --backend cuda: the GPU benchmark (cuda_bench.h), not the verified workload.
int RunCudaBenchCommand(const CommonOptions& common, const BenchOptions& options) {
#if KVSTASH_HAVE_CUDA
  auto client = ConnectCli(common, kBenchTimeoutMs);
  if (!client.ok()) return Fail("bench", client.status());
  CudaBenchConfig config;
  config.chunk_counts = options.cuda_chunk_counts;
  config.latency_samples = options.cuda_latency_samples;
  config.layouts = options.cuda_layouts;
  config.in_step_at_unix_ms = options.cuda_in_step_at;
  config.in_step_seconds = options.cuda_in_step_seconds;
  Result<CudaBenchResults> results = bench::RunCudaBench(**client, config);
  if (!results.ok()) return Fail("bench", results.status());
  std::cout << (common.json ? bench::CudaBenchJson(*results).dump(2) + "\n"
                            : bench::CudaBenchText(*results));
  // An error (a request that failed, a chunk not stored or not found) is a
  // failure like any other; a figure short of its target is told apart, so
  // that scripts can fail on errors alone.
  constexpr int kShortOfTargets = 3;
  if (!results->errors.empty()) return 1;
  return results->short_of_targets.empty() ? 0 : kShortOfTargets;
#else
  (void)common;
  (void)options;
  return Fail("bench", Status::Unavailable("this kvstash was built without CUDA; --backend cuda "
                                           "needs a build with nvcc (KVSTASH_WITH_CUDA=ON)"));
#endif
}

int RunTierBenchCommand(const CommonOptions& common, const TierBenchOptions& o) {
  if (o.l2_path.empty() && o.l3_redis.empty()) {
    return Fail("bench tiers", Status::InvalidArgument(
                                   "name a tier to measure: --l2-path DIR (the disk of kvstashd's "
                                   "--l2-path) and/or --l3-redis HOST:PORT (its --l3-redis)"));
  }
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!o.l2_path.empty()) {
    bench::DiskLimitConfig c;
    c.dir = o.l2_path;
    c.chunk_bytes = static_cast<uint64_t>(o.chunk_mb * (1 << 20));
    c.chunks = o.chunks;
    c.rings = o.rings;
    c.depth = o.depth;
    c.pool_threads = o.pool_threads;
    c.runs = o.runs;
    Result<bench::DiskLimits> l2 = bench::MeasureDiskLimits(c);
    if (!l2.ok()) return Fail("bench tiers", l2.status());
    if (common.json) {
      json["l2"] = {{"dir", c.dir},
                    {"chunk_bytes", c.chunk_bytes},
                    {"chunks", c.chunks},
                    {"rings", c.rings},
                    {"depth", c.depth},
                    {"write_ratio", l2->write_ratio},
                    {"read_ratio", l2->read_ratio},
                    {"pool_write_ratio", l2->pool_write_ratio},
                    {"pool_read_ratio", l2->pool_read_ratio}};
      for (const bench::DiskRun& r : l2->runs) {
        json["l2"]["runs"].push_back({{"raw_write_gbps", r.raw_w()},
                                      {"raw_read_gbps", r.raw_r()},
                                      {"write_gbps", r.tier_w},
                                      {"read_gbps", r.tier_r},
                                      {"pool_write_gbps", r.pool_w},
                                      {"pool_read_gbps", r.pool_r}});
      }
    } else {
      std::cout << bench::DiskLimitsText(*l2);
    }
  }
  if (!o.l3_redis.empty()) {
    bench::RedisLimitConfig c;
    c.endpoint = o.l3_redis.substr(0, o.l3_redis.find(','));
    c.user = o.l3_user;
    c.password = o.l3_password;
    c.value_bytes = static_cast<uint64_t>(o.value_mb * (1 << 20));
    c.values = o.values;
    c.connections = o.connections;
    c.runs = o.runs;
    Result<bench::RedisLimits> l3 = bench::MeasureRedisLimits(c);
    if (!l3.ok()) return Fail("bench tiers", l3.status());
    if (common.json) {
      json["l3"] = {{"endpoint", c.endpoint},     {"value_bytes", c.value_bytes},
                    {"values", c.values},         {"connections", c.connections},
                    {"put_ratio", l3->put_ratio}, {"get_ratio", l3->get_ratio}};
      for (const bench::RedisRun& r : l3->runs) {
        json["l3"]["runs"].push_back({{"raw_set_gbps", r.raw_set},
                                      {"raw_get_gbps", r.raw_get},
                                      {"put_gbps", r.tier_put},
                                      {"get_gbps", r.tier_get}});
      }
    } else {
      std::cout << bench::RedisLimitsText(*l3);
    }
  }
  if (common.json) std::cout << json.dump(2) << "\n";
  return 0;
}

int RunBenchCommand(const CommonOptions& common, BenchOptions& options) {
  if (options.config.backend == "cuda") return RunCudaBenchCommand(common, options);
  options.config.shape.dtype = DTypeNames().at(options.dtype);
  auto client = ConnectCli(common, kBenchTimeoutMs);
  if (!client.ok()) return Fail("bench", client.status());
  Result<BenchResults> results = bench::RunBench(**client, options.config);
  if (!results.ok()) return Fail("bench", results.status());
  if (common.json) {
    std::cout << bench::BenchJson(options.config, *results).dump(2) << "\n";
  } else {
    std::cout << bench::BenchText(options.config, *results);
  }
  return results->passed() ? 0 : 1;
}

}  // namespace

Command AddBenchCommand(CLI::App& app, SharedOptions common) {
  auto options = std::make_shared<BenchOptions>();
  BenchConfig& c = options->config;
  CLI::App* command = app.add_subcommand(
      "bench",
      "Run a synthetic engine: register, store prompts sharing a prefix, look up, "
      "retrieve into other blocks and verify every byte");
  command
      ->add_option("--backend", c.backend,
                   "host: the verified synthetic workload in shared memory; cuda: GPU "
                   "throughput and latency against raw copies (needs kvstashd --backend cuda; "
                   "exits 1 on any error, 3 when it ran clean but a figure missed its target)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  command
      ->add_option("--chunk-counts", options->cuda_chunk_counts,
                   "cuda: chunks per request to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command
      ->add_option("--layouts", options->cuda_layouts,
                   "cuda: layouts to measure, comma-separated (llama-3-8b, llama-3-70b-tp8, "
                   "deepseek-v3-mla-fp8, qwen2.5-0.5b; default all)")
      ->delimiter(',');
  command
      ->add_option("--in-step-at", options->cuda_in_step_at,
                   "cuda: measure in step with other bench processes (one per GPU, say) instead "
                   "of the full bench: one layout and one chunk count are stored and warmed up, "
                   "then four phases of --in-step-seconds each, 1 s apart, start at this "
                   "wall-clock instant (Unix time in ms): retrieves back to back, the raw host "
                   "to device copy of the same bytes, stores of fresh chunks back to back, the "
                   "raw device to host copy; each phase's bytes and wall-clock interval are "
                   "reported, and reaching an instant late is an error")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--in-step-seconds", options->cuda_in_step_seconds,
                   "cuda, with --in-step-at: how long each phase lasts")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  command
      ->add_option("--latency-samples", options->cuda_latency_samples,
                   "cuda: requests per latency figure")
      ->check(CLI::Range(10, 1000000))
      ->capture_default_str();
  command->add_option("--model", c.model, "model name (part of the key namespace)")
      ->capture_default_str();
  command->add_option("--layers", c.shape.layers, "KV layers the synthetic engine registers")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--kv-heads", c.shape.kv_heads, "KV heads per layer")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--head-dim", c.shape.head_dim, "elements per head")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  std::vector<std::string> dtypes;
  for (const auto& entry : DTypeNames()) dtypes.push_back(entry.first);
  command->add_option("--dtype", options->dtype, "element type of the KV cache")
      ->check(CLI::IsMember(dtypes))
      ->capture_default_str();
  command->add_option("--block-tokens", c.shape.block_tokens, "tokens per paged KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command->add_option("--num-blocks", c.shape.num_blocks,
                      "blocks per layer (default: twice the blocks of one prompt)");
  command->add_option("--prompts", c.prompts, "prompts per round")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--prompt-tokens", c.prompt_tokens, "tokens per prompt")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  command
      ->add_option("--shared-prefix-tokens", c.shared_prefix_tokens,
                   "leading tokens every prompt shares")
      ->capture_default_str();
  command->add_option("--rounds", c.rounds, "store + retrieve passes over the prompts")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--seed", c.seed,
                   "prompt contents, and so chunk keys and bytes; change it to start cold, "
                   "keep it to retrieve what an earlier --phase store stored")
      ->capture_default_str();
  command
      ->add_option("--phase", c.phase,
                   "both: store then retrieve; store: only store; retrieve: only look up and "
                   "retrieve what a --phase store run with the same --seed and shape stored "
                   "(on this daemon before a restart, or on another sharing its L3), every "
                   "chunk expected and every byte verified")
      ->check(CLI::IsMember({"both", "store", "retrieve"}))
      ->capture_default_str();
  command->add_flag("--verify,!--no-verify", c.verify, "check every retrieved byte (default on)");

  TierBenchOptions& t = options->tiers;
  CLI::App* tiers = command->add_subcommand(
      "tiers",
      "Measure each tier against its raw limit in the same run, without a daemon: L2 "
      "against raw O_DIRECT sequential writes and reads of the same bytes on the same "
      "disk, L3 against raw pipelined SET/GET of the same value size on the same Redis");
  tiers->add_option("--l2-path", t.l2_path,
                    "a directory on the disk of kvstashd's --l2-path (a scratch folder is made "
                    "inside and removed)");
  tiers->add_option("--l3-redis", t.l3_redis,
                    "the Redis of kvstashd's --l3-redis; with a list, the first HOST:PORT");
  tiers->add_option("--l3-user", t.l3_user, "ACL user for AUTH");
  tiers->add_option("--l3-password", t.l3_password, "password for AUTH");
  tiers->add_option("--chunk-mb", t.chunk_mb, "L2 chunk size in MiB")
      ->check(CLI::Range(0.004, 1024.0))
      ->capture_default_str();
  tiers->add_option("--chunks", t.chunks, "L2 chunks written and read per run")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  tiers->add_option("--rings", t.rings, "L2 io_uring rings (threads), as kvstashd runs them")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  tiers
      ->add_option("--depth", t.depth,
                   "L2 io_uring chunks in flight per ring (raw queue depth: rings x depth)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  tiers
      ->add_option("--pool-threads", t.pool_threads,
                   "threads of the thread-pool L2 measured beside it (0: not measured)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  tiers->add_option("--value-mb", t.value_mb, "L3 value size in MiB")
      ->check(CLI::Range(0.001, 512.0))
      ->capture_default_str();
  tiers->add_option("--values", t.values, "L3 values written and read per run")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  tiers->add_option("--connections", t.connections, "L3 raw connections = tier I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  tiers->add_option("--runs", t.runs, "runs; each ratio is taken within a run, the median shown")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  return {command, [common, options, tiers] {
            if (tiers->parsed()) return RunTierBenchCommand(*common, options->tiers);
            return RunBenchCommand(*common, *options);
          }};
}

}  // namespace kvstash::cli
