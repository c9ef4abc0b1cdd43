// The C++ client's per-call latency on a running kvstashd: ping, a 64-key
// lookup that hits every key, and retrieves of 1 and 64 chunks of a small
// layout (one layer, 32 KiB chunks: the request's fixed cost, not PCIe),
// p50/p99 in microseconds, beside a raw ZeroMQ round trip of the same frame
// sizes in the same run, as JSON. bench/python_call_overhead.py runs it
// beside the same calls from the Python package to measure what Python adds;
// scripts/fixed_cost.sh runs it against a traced kvstashd.
//
//   kvstash_call_latency <socket> [samples] [--profile ROUNDS] [--spin-us N]
//                        [--no-shm-channel] [--pause-us N]
//
// --spin-us sets ClientOptions::busy_poll_us (the client's spin window);
// --no-shm-channel sets ClientOptions::shm_channel = false (requests over
// ZeroMQ only). --pause-us N sleeps N us before each timed call (outside
// its time), as an engine's requests come between its GPU work: past the
// spin windows, so that the call finds kvstashd's frontend and the client's
// I/O thread asleep. The JSON says whether the channel was attached.
//
// With KVSTASH_TRACE_FILE=<prefix> set (in this process and in kvstashd),
// libkvstash and kvstashd record every request's stages, and this probe
// writes <prefix>.caller.<pid>: per call, in order, when the engine's thread
// made the call and when it had the outcome (bench/probes/trace_stages.py
// joins the files). --profile ROUNDS instead stores and retrieves 64 chunks
// ROUNDS times, for a profiler attached to kvstashd.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/host_memory.h"
#include "kvstash/layouts.h"
#include "zmq_echo.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// The engine's side of the trace: when each call started and returned.
struct CallerTrace {
  struct Call {
    const char* label;  // "ping", ...; "-" for warm-ups and untimed calls
    int64_t start_ns, woke_ns;
  };
  std::vector<Call> calls;
  bool on = std::getenv("KVSTASH_TRACE_FILE") != nullptr;
  ~CallerTrace() {
    if (!on) return;
    const std::string path =
        std::string(std::getenv("KVSTASH_TRACE_FILE")) + ".caller." + std::to_string(::getpid());
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) return;
    for (const Call& call : calls) {
      std::fprintf(file, "%s %lld %lld\n", call.label, (long long)call.start_ns,
                   (long long)call.woke_ns);
    }
    std::fclose(file);
  }
};

// Times `call`; `after` runs outside the timing (a lookup's lease release:
// leases per client are bounded), unless it is NoAfter. `call` and `after`
// are one request each; the trace names the timed ones `label`.
struct NoAfter {};

template <typename Call, typename After = NoAfter>
std::vector<double> Time(CallerTrace& trace, const char* label, int samples, int pause_us,
                         Call call, After after = {}) {
  constexpr bool kAfter = !std::is_same_v<After, NoAfter>;
  const auto untimed = [&] {
    if constexpr (kAfter) {
      after();
      if (trace.on) trace.calls.push_back({"-", 0, 0});
    }
  };
  for (int i = 0; i < samples / 10 + 10; ++i) {  // warm up
    call();
    if (trace.on) trace.calls.push_back({"-", 0, 0});
    untimed();
  }
  std::vector<double> us;
  us.reserve(samples);
  for (int i = 0; i < samples; ++i) {
    if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    const auto start = Clock::now();
    call();
    const auto woke = Clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(woke - start).count());
    if (trace.on) trace.calls.push_back({label, Ns(start), Ns(woke)});
    untimed();
  }
  return us;
}

int Fail(const kvstash::Status& status) {
  std::fprintf(stderr, "kvstash_call_latency: %s\n", status.ToString().c_str());
  return 1;
}

// Frame sizes of the requests timed here (FlatBuffers envelope + body), so
// that the raw round trip moves as many bytes: a Ping, and a Lookup of 64
// 32-byte keys.
constexpr size_t kPingFrameBytes = 64;
constexpr size_t kLookupFrameBytes = 64 * 32 + 128;

std::string Stat(const char* name, const std::vector<double>& us) {
  char text[160];
  std::snprintf(text, sizeof(text), "\"%s_p50_us\": %.2f, \"%s_p99_us\": %.2f", name,
                Percentile(us, 0.5), name, Percentile(us, 0.99));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: kvstash_call_latency <socket> [samples] [--profile ROUNDS] [--spin-us N] "
                 "[--no-shm-channel] [--pause-us N]\n");
    return 2;
  }
  int samples = 2000;
  int pause_us = 0;
  int profile_rounds = 0;
  kvstash::ClientOptions options;
  options.socket = argv[1];
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
      profile_rounds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--spin-us") == 0 && i + 1 < argc) {
      options.busy_poll_us = uint32_t(std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--pause-us") == 0 && i + 1 < argc) {
      pause_us = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-shm-channel") == 0) {
      options.shm_channel = false;
    } else {
      samples = std::atoi(argv[i]);
    }
  }
  auto client = kvstash::Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  kvstash::Client& c = **client;

  // A kvstashd just started pins its pool in the background; stores skip
  // (no room) until enough of it is ready.
  for (;;) {
    auto ready = c.PoolReady().get();
    if (!ready.ok()) return Fail(ready.status());
    if (ready->ready_bytes >= ready->capacity_bytes) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
  std::vector<uint32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0u);
  auto prompt = [&](int first_token) {
    std::vector<int32_t> tokens(size_t(64) * chunk_tokens);
    std::iota(tokens.begin(), tokens.end(), first_token);
    return tokens;
  };
  const std::vector<int32_t> tokens = prompt(7);
  auto chunks =
      kvstash::PromptChunks(*reg, tokens.data(), tokens.size(), table.data(), table.size());
  if (!chunks.ok()) return Fail(chunks.status());
  auto stored = c.Store(reg->id, *chunks).get();
  if (!stored.ok()) return Fail(stored.status());
  for (const kvstash::ChunkOutcome& outcome : *stored) {
    if (outcome.result != kvstash::ChunkResult::kStored &&
        outcome.result != kvstash::ChunkResult::kAlreadyPresent) {
      return Fail(kvstash::Status::Internal("the first store failed: " + outcome.error.ToString()));
    }
  }
  const auto keys = kvstash::ChunkKeys(*reg, tokens.data(), tokens.size());

  bool ok = true;
  std::string failed;  // the first call that failed
  auto check = [&](bool good, const std::string& what) {
    if (!good && failed.empty()) failed = what;
    ok &= good;
  };
  if (profile_rounds > 0) {
    // 64-chunk stores of fresh keys and their retrieves; cleared now and
    // then so that the pool never fills.
    for (int round = 0; round < profile_rounds; ++round) {
      const std::vector<int32_t> fresh = prompt(1000 + round * 64 * int(chunk_tokens));
      auto batch =
          kvstash::PromptChunks(*reg, fresh.data(), fresh.size(), table.data(), table.size());
      ok &= batch.ok();
      if (!batch.ok()) break;
      ok &= c.Store(reg->id, *batch).get().ok();
      ok &= c.Retrieve(reg->id, *batch).get().ok();
      if (round % 32 == 31) ok &= c.Clear("call-latency-cpp").get().ok();
    }
    if (!ok) return Fail(kvstash::Status::Internal("a store or retrieve failed"));
    std::printf("{\"profile_rounds\": %d}\n", profile_rounds);
    return 0;
  }

  CallerTrace trace;
  const auto ping =
      Time(trace, "ping", samples, pause_us, [&] { check(c.Ping().get().ok(), "ping"); });
  uint64_t lease = 0;
  const auto lookup = Time(
      trace, "lookup64", samples, pause_us,
      [&] {
        auto found = c.Lookup(reg->id, keys).get();
        check(found.ok() && found->hit_chunks == 64,
              "lookup: " + (found.ok() ? std::to_string(found->hit_chunks) + " hits"
                                       : found.status().ToString()));
        lease = found.ok() ? found->lease_id : 0;
      },
      [&] {
        if (lease != 0) check(c.Release(lease).get().ok(), "release");
      });
  const std::vector<kvstash::ChunkBlocks> one(chunks->begin(), chunks->begin() + 1);
  const auto retrieve1 = Time(trace, "retrieve1", samples, pause_us, [&] {
    auto got = c.Retrieve(reg->id, one).get();
    check(got.ok() && (*got)[0].result == kvstash::ChunkResult::kRetrieved,
          "retrieve1: " + (got.ok() ? (*got)[0].error.ToString() : got.status().ToString()));
  });
  const auto retrieve64 = Time(trace, "retrieve64", samples / 4, pause_us, [&] {
    auto got = c.Retrieve(reg->id, *chunks).get();
    check(got.ok() && got->back().result == kvstash::ChunkResult::kRetrieved,
          "retrieve64: " + (got.ok() ? got->back().error.ToString() : got.status().ToString()));
  });
  if (!ok) return Fail(kvstash::Status::Internal("a call failed: " + failed));
  auto raw_ping = kvstash::bench::ZmqRoundTripsUs(kPingFrameBytes, samples);
  if (!raw_ping.ok()) return Fail(raw_ping.status());
  auto raw_lookup = kvstash::bench::ZmqRoundTripsUs(kLookupFrameBytes, samples);
  if (!raw_lookup.ok()) return Fail(raw_lookup.status());
  std::printf(
      "{%s, %s, %s, %s, %s, %s, \"lookup64_over_raw\": %.2f, \"ping_over_raw\": %.2f, "
      "\"shm_channel\": %s, \"samples\": %d, \"pause_us\": %d}\n",
      Stat("ping", ping).c_str(), Stat("lookup64", lookup).c_str(),
      Stat("retrieve1", retrieve1).c_str(), Stat("retrieve64", retrieve64).c_str(),
      Stat("raw_zmq_ping_frame", *raw_ping).c_str(),
      Stat("raw_zmq_lookup_frame", *raw_lookup).c_str(),
      Percentile(lookup, 0.5) / Percentile(*raw_lookup, 0.5),
      Percentile(ping, 0.5) / Percentile(*raw_ping, 0.5),
      c.server_info().shm_channel ? "true" : "false", samples, pause_us);
  return 0;
}
