// The C++ client's per-call latency on a running kvstashd (host backend):
// ping and a 64-key lookup that hits every key, p50/p99 in microseconds, as
// JSON. bench/python_call_overhead.py runs it beside the same calls from
// the Python package to measure what Python adds.
//   kvstash_call_latency <socket> [samples]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/host_memory.h"
#include "kvstash/layouts.h"

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// Times `call`; `after` runs outside the timing (a lookup's lease release:
// leases per client are bounded).
template <typename Call, typename After>
std::vector<double> Time(int samples, Call call, After after) {
  for (int i = 0; i < samples / 10 + 10; ++i) {  // warm up
    call();
    after();
  }
  std::vector<double> us;
  us.reserve(samples);
  for (int i = 0; i < samples; ++i) {
    const auto start = Clock::now();
    call();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    after();
  }
  return us;
}

template <typename Call>
std::vector<double> Time(int samples, Call call) {
  return Time(samples, call, [] {});
}

int Fail(const kvstash::Status& status) {
  std::fprintf(stderr, "kvstash_call_latency: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvstash_call_latency <socket> [samples]\n");
    return 2;
  }
  const int samples = argc > 2 ? std::atoi(argv[2]) : 2000;
  kvstash::ClientOptions options;
  options.socket = argv[1];
  auto client = kvstash::Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  kvstash::Client& c = **client;

  // One small layer, 64 chunks stored, so that the lookup hits all 64 keys.
  const uint32_t chunk_tokens = c.server_info().chunk_tokens;
  const uint32_t block_tokens = 16;
  const uint32_t num_blocks = 64 * std::max(1u, chunk_tokens / block_tokens);
  const kvstash::LayerGeometry g =
      kvstash::VllmFlashNhdGeometry(num_blocks, block_tokens, 1, 64, kvstash::DType::kU8);
  auto memory = kvstash::HostKvMemory::Create(kvstash::LayerExtentBytes(g));
  if (!memory.ok()) return Fail(memory.status());
  kvstash::RegisterOptions reg_options;
  reg_options.model = "call-latency-cpp";
  reg_options.allocations.push_back(memory->handle());
  reg_options.layers.push_back({0, 0, g});
  auto reg = c.RegisterKV(reg_options).get();
  if (!reg.ok()) return Fail(reg.status());
  std::vector<int32_t> tokens(size_t(64) * chunk_tokens);
  std::iota(tokens.begin(), tokens.end(), 7);
  std::vector<uint32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0u);
  auto chunks = kvstash::PromptChunks(*reg, tokens.data(), tokens.size(), table.data(), table.size());
  if (!chunks.ok()) return Fail(chunks.status());
  auto stored = c.Store(reg->id, *chunks).get();
  if (!stored.ok()) return Fail(stored.status());
  const auto keys = kvstash::ChunkKeys(*reg, tokens.data(), tokens.size());

  bool ok = true;
  const auto ping = Time(samples, [&] { ok &= c.Ping().get().ok(); });
  uint64_t lease = 0;
  const auto lookup = Time(
      samples,
      [&] {
        auto found = c.Lookup(reg->id, keys).get();
        ok &= found.ok() && found->hit_chunks == 64;
        lease = found.ok() ? found->lease_id : 0;
      },
      [&] {
        if (lease != 0) ok &= c.Release(lease).get().ok();
      });
  if (!ok) return Fail(kvstash::Status::Internal("a call failed or a lookup missed"));
  std::printf(
      "{\"ping_p50_us\": %.2f, \"ping_p99_us\": %.2f, \"lookup64_p50_us\": %.2f, "
      "\"lookup64_p99_us\": %.2f, \"samples\": %d}\n",
      Percentile(ping, 0.5), Percentile(ping, 0.99), Percentile(lookup, 0.5),
      Percentile(lookup, 0.99), samples);
  return 0;
}
