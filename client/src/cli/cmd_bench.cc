// `kvstash bench`: runs the synthetic engine workload (bench_workload.h)
// against kvstashd and reports throughput, hit rates, latency and PASS/FAIL.
#include <iostream>
#include <map>

#include "bench_report.h"
#include "bench_workload.h"
#include "common.h"
#if KVSTASH_HAVE_CUDA
#include "cuda_bench.h"
#endif

namespace kvstash::cli {

namespace {

// The workloads themselves live in kvstash::bench_core (client/src/bench/).
using bench::BenchConfig;
using bench::BenchResults;
#if KVSTASH_HAVE_CUDA
using bench::CudaBenchConfig;
using bench::CudaBenchResults;
#endif

struct BenchOptions {
  BenchConfig config;
  std::string dtype = "bf16";
  std::vector<uint32_t> cuda_chunk_counts = {1, 4, 16, 64};
  int cuda_latency_samples = 1000;
  std::vector<std::string> cuda_layouts;
};

const std::map<std::string, DType>& DTypeNames() {
  static const std::map<std::string, DType> names = {
      {"bf16", DType::kBF16},   {"f16", DType::kF16},       {"fp16", DType::kF16},
      {"f32", DType::kF32},     {"fp32", DType::kF32},      {"fp8", DType::kF8E4M3},
      {"f8e4m3", DType::kF8E4M3}, {"f8e5m2", DType::kF8E5M2}, {"u8", DType::kU8},
      {"i8", DType::kI8},       {"int8", DType::kI8},
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
  Result<CudaBenchResults> results = bench::RunCudaBench(**client, config);
  if (!results.ok()) return Fail("bench", results.status());
  std::cout << (common.json ? bench::CudaBenchJson(*results).dump(2) + "\n"
                            : bench::CudaBenchText(*results));
  return results->passed() ? 0 : 1;
#else
  (void)common;
  (void)options;
  return Fail("bench", Status::Unavailable("this kvstash was built without CUDA; --backend cuda "
                                           "needs a build with nvcc (KVSTASH_WITH_CUDA=ON)"));
#endif
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
      "bench", "Run a synthetic engine: register, store prompts sharing a prefix, look up, "
               "retrieve into other blocks and verify every byte");
  command->add_option("--backend", c.backend,
                      "host: the verified synthetic workload in shared memory; cuda: GPU "
                      "throughput and latency against raw copies (needs kvstashd --backend cuda)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  command->add_option("--chunk-counts", options->cuda_chunk_counts,
                      "cuda: chunks per request to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--layouts", options->cuda_layouts,
                      "cuda: layouts to measure, comma-separated (llama-3-8b, llama-3-70b-tp8, "
                      "deepseek-v3-mla-fp8, qwen2.5-0.5b; default all)")
      ->delimiter(',');
  command->add_option("--latency-samples", options->cuda_latency_samples,
                      "cuda: requests per latency figure")
      ->check(CLI::Range(10, 1000000))
      ->capture_default_str();
  command->add_option("--model", c.model, "model name (part of the key namespace)")
      ->capture_default_str();
  command->add_option("--layers", c.shape.layers, "KV layers the synthetic engine registers")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  command->add_option("--kv-heads", c.shape.kv_heads, "KV heads per layer")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  command->add_option("--head-dim", c.shape.head_dim, "elements per head")
      ->check(CLI::Range(1, 4096))->capture_default_str();
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
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  command->add_option("--prompt-tokens", c.prompt_tokens, "tokens per prompt")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  command->add_option("--shared-prefix-tokens", c.shared_prefix_tokens,
                      "leading tokens every prompt shares")
      ->capture_default_str();
  command->add_option("--rounds", c.rounds, "store + retrieve passes over the prompts")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--seed", c.seed, "prompt contents; change it to start cold")
      ->capture_default_str();
  command->add_flag("--verify,!--no-verify", c.verify,
                    "check every retrieved byte (default on)");
  return {command, [common, options] { return RunBenchCommand(*common, *options); }};
}

}  // namespace kvstash::cli
