// The measurements of `kvstash bench --backend cuda`.
#include "kvstash/bench/cuda_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include <unistd.h>

#include "baseline_copy.h"
#include "cuda_bench_kv.h"
#include "kvstash/bench/bench_report.h"
#include "kvstash/completion_board.h"
#include "kvstash/cuda/cuda_status.h"
#include "kvstash/cuda/streams.h"
#include "kvstash/gpu_completion.h"
#include "raw_copy.h"
#include "zmq_echo.h"

namespace kvstash::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Median(std::vector<double> values) { return Percentile(std::move(values), 0.5); }
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The daemon as Describe shows it, once its L1 pool is pinned.
Result<json> DescribeWhenReady(Client& client) {
  const auto deadline = Clock::now() + std::chrono::minutes(2);
  for (;;) {
    auto described = client.Describe().get();
    if (!described.ok()) return described.status();
    json doc = json::parse(*described);
    if (doc["server"]["backend"] != "cuda") {
      return Status::InvalidArgument("kvstashd runs the " +
                                     doc["server"]["backend"].get<std::string>() +
                                     " backend; start it with --backend cuda");
    }
    const json& pool = doc["tiers"][0]["pool"];
    if (pool["slabs_ready"].get<uint64_t>() + pool["slabs_failed"].get<uint64_t>() >=
        pool["slabs"].get<uint64_t>()) {
      return doc;
    }
    if (Clock::now() > deadline)
      return Status::TimedOut("the L1 pool was not pinned within 2 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Bytes the daemon's NVLink peers have carried so far for copies of
// `direction` ("store", "retrieve").
uint64_t RelayBytes(Client& client, const std::string& direction) {
  auto described = client.Describe().get();
  if (!described.ok()) return 0;
  const json doc = json::parse(*described, nullptr, false);
  if (doc.is_discarded()) return 0;
  const json multipath = doc.value("backend", json::object()).value("multipath", json::object());
  uint64_t bytes = 0;
  for (const json& h : multipath.value("relays", json::array())) {
    if (h.value("direction", "") == direction) bytes += h.value("bytes_carried", uint64_t{0});
  }
  return bytes;
}

// The targets of multi-path copies: against one link, from 4 chunks of
// 32 MiB (Llama-3-8B's), by the GPUs that can carry a copy. Stores aim
// lower: plain D2H through peers (bench/probes' kvstash_d2h_paths_probe)
// reached 1.97x one link with one peer and 2.53x with three on H100s.
double MultipathTarget(uint64_t chunk_bytes, uint32_t n, uint32_t paths, bool store) {
  if (n < 4 || chunk_bytes < (24u << 20)) return 0;
  if (store) return paths >= 4 ? 2.2 : paths == 2 ? 1.7 : 0;
  return paths >= 4 ? 2.8 : paths == 2 ? 1.8 : 0;
}

// Ok when every chunk of a reply came out as `expected`.
Status CheckAll(const char* what, const Result<std::vector<ChunkOutcome>>& outcomes,
                ChunkResult expected) {
  if (!outcomes.ok()) return outcomes.status();
  for (const ChunkOutcome& o : *outcomes) {
    if (o.result != expected) {
      return Status::Internal(std::string(what) + " chunk " + NameOf(o.result) +
                              (o.error.ok() ? "" : ": " + o.error.ToString()));
    }
  }
  return Status::Ok();
}

// One registered layout and the requests the bench sends for it.
class LayoutRun {
 public:
  LayoutRun(Client& client, const RegisteredKv& reg, std::vector<uint32_t> blocks,
            uint32_t max_chunks)
      : client_(client), reg_(reg), blocks_(std::move(blocks)), max_chunks_(max_chunks) {
    nonce_ = std::random_device{}();
  }

  // n chunks with fresh keys, from the first half of the blocks.
  std::vector<ChunkBlocks> Fresh(uint32_t n) {
    std::vector<ChunkBlocks> chunks(n);
    for (uint32_t c = 0; c < n; ++c) {
      const uint64_t id = ++counter_;
      std::memcpy(chunks[c].key.data(), &nonce_, sizeof(nonce_));
      std::memcpy(chunks[c].key.data() + 8, &id, sizeof(id));
      Fill(chunks[c], c, 0);
    }
    return chunks;
  }
  // The same keys, aimed at the second half of the blocks.
  std::vector<ChunkBlocks> Into(std::vector<ChunkBlocks> chunks) {
    for (uint32_t c = 0; c < chunks.size(); ++c) Fill(chunks[c], c, max_chunks_);
    return chunks;
  }

  Status Store(const std::vector<ChunkBlocks>& chunks) {
    return CheckAll("store", client_.Store(reg_.id, chunks).get(), ChunkResult::kStored);
  }
  Status Retrieve(const std::vector<ChunkBlocks>& chunks) {
    return CheckAll("retrieve", client_.Retrieve(reg_.id, chunks).get(), ChunkResult::kRetrieved);
  }
  Status Both(const std::vector<ChunkBlocks>& store, const std::vector<ChunkBlocks>& retrieve) {
    auto stored = client_.Store(reg_.id, store);
    auto retrieved = client_.Retrieve(reg_.id, retrieve);
    const Status s = CheckAll("store", stored.get(), ChunkResult::kStored);
    const Status r = CheckAll("retrieve", retrieved.get(), ChunkResult::kRetrieved);
    return s.ok() ? r : s;
  }

 private:
  void Fill(ChunkBlocks& chunk, uint32_t c, uint32_t first_chunk) {
    const uint32_t per_chunk = reg_.chunk_tokens / reg_.block_tokens;
    const auto first = blocks_.begin() + (first_chunk + c) * per_chunk;
    chunk.num_tokens = reg_.chunk_tokens;
    chunk.block_ids.assign(first, first + per_chunk);
  }

  Client& client_;
  const RegisteredKv& reg_;
  const std::vector<uint32_t> blocks_;  // shuffled: engines' blocks are scattered
  const uint32_t max_chunks_;
  uint64_t nonce_ = 0;
  uint64_t counter_ = 0;
};

// Times `op` and the raw copy of the same bytes in turns, `reps` pairs after
// one untimed of each, so that both see the same state of the machine (the
// raw figures themselves drift between runs by up to 20%).
template <typename Op>
Status MeasurePairs(int reps, Op op, RawCopy& raw, RawCopy::Way way, uint64_t raw_bytes,
                    ThroughputRow& row) {
  KVSTASH_RETURN_IF_ERROR(op());
  KVSTASH_RETURN_IF_ERROR(raw.Seconds(way, raw_bytes).status());
  std::vector<double> seconds, raw_seconds, ratios;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    KVSTASH_RETURN_IF_ERROR(op());
    seconds.push_back(Seconds(start));
    Result<double> raw_one = raw.Seconds(way, raw_bytes);
    if (!raw_one.ok()) return raw_one.status();
    raw_seconds.push_back(*raw_one);
    ratios.push_back(raw_seconds.back() / seconds.back());
  }
  row.seconds = Median(seconds);
  row.raw_seconds = Median(raw_seconds);
  row.ratio_median = Median(ratios);
  row.ratio_p10 = Percentile(ratios, 0.1);
  row.ratio_p90 = Percentile(ratios, 0.9);
  row.samples = reps;
  return Status::Ok();
}

int Reps(uint32_t chunks) { return chunks <= 4 ? 40 : chunks <= 16 ? 20 : 10; }

// The engine-visible targets: the least ratio to the raw copy of the same
// bytes that kvstash aims for, by chunk size (32 MiB, 10 MiB, 3 MiB) and count.
double EngineTarget(uint64_t chunk_bytes, bool store, uint32_t n) {
  const int column = n == 1 ? 0 : n < 16 ? 1 : 2;
  static constexpr double kLarge[2][3] = {{0.90, 0.95, 0.97}, {0.85, 0.95, 0.97}};
  static constexpr double kTen[3] = {0.85, 0.92, 0.95};
  static constexpr double kSmall[3] = {0.70, 0.85, 0.90};
  if (chunk_bytes >= (24u << 20)) return kLarge[store ? 1 : 0][column];
  if (chunk_bytes >= (6u << 20)) return kTen[column];
  return kSmall[column];
}

// The engine's view of GPU-side completion: its stream, a spin event it
// records behind its waits, the board, and the in-process baseline.
struct EngineSide {
  CompletionBoard& board;
  cudaStream_t stream;
  cudaEvent_t first;
  cudaEvent_t last;
  BaselineCopy& baseline;
  // With KVSTASH_TRACE_FILE=<prefix>: each engine-visible retrieve's call,
  // return and visible times (steady clock ns), for joining with kvstashd's
  // per-copy debug lines (bench/probes/engine_join.py).
  std::ofstream* samples = nullptr;
};

// <prefix>.bench.<pid> where KVSTASH_TRACE_FILE=<prefix> is set; else null.
std::unique_ptr<std::ofstream> SampleFile() {
  const char* prefix = std::getenv("KVSTASH_TRACE_FILE");
  if (prefix == nullptr || *prefix == 0) return nullptr;
  return std::make_unique<std::ofstream>(
      std::string(prefix) + ".bench." + std::to_string(::getpid()), std::ios::app);
}

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Spins until `event` completes (an engine's next kernel would start then).
Status SpinOn(cudaEvent_t event) {
  cudaError_t state;
  while ((state = cudaEventQuery(event)) == cudaErrorNotReady) {
  }
  return cuda::CudaStatus(state, "cudaEventQuery");
}

std::vector<uint32_t> BlocksOf(const std::vector<ChunkBlocks>& chunks) {
  std::vector<uint32_t> blocks;
  for (const ChunkBlocks& c : chunks)
    blocks.insert(blocks.end(), c.block_ids.begin(), c.block_ids.end());
  return blocks;
}

// Engine-visible store and retrieve of n chunks: from the call to the moment
// an event recorded on the engine's stream behind its wait completes (store:
// until the blocks may be reused), each paired with the raw copy of the same
// bytes and the in-process baseline, in turns. Then a layer-wise retrieve:
// the time to the first and to the last layer range.
Status MeasureEngineVisible(Client& client, const RegisteredKv& reg, LayoutRun& run,
                            EngineSide& engine, RawCopy& raw, const std::string& layout,
                            uint32_t layers, uint32_t n, const std::vector<ChunkBlocks>& targets,
                            CudaBenchResults& out) {
  const uint64_t bytes = n * reg.chunk_bytes;
  const int reps = Reps(n);
  auto retrieve = [&]() -> Result<double> {
    const auto start = Clock::now();
    Result<GpuTransfer> load =
        client.RetrieveOnStream(reg.id, targets, engine.board, engine.stream);
    if (!load.ok()) return load.status();
    const auto returned = Clock::now();
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(engine.last, engine.stream));
    auto flagged = returned;
    if (engine.samples != nullptr) {  // tracing: when the CPU sees the slot released
      const uint32_t last = load->signal.count - 1;
      while (!engine.board.Released(load->signal, last)) {
      }
      flagged = Clock::now();
    }
    KVSTASH_RETURN_IF_ERROR(SpinOn(engine.last));
    const double seconds = Seconds(start);
    if (engine.samples != nullptr) {
      *engine.samples << layout << ' ' << n << ' ' << bytes << ' ' << Ns(start) << ' '
                      << Ns(returned) << ' ' << Ns(Clock::now()) << ' ' << Ns(flagged) << '\n';
    }
    KVSTASH_RETURN_IF_ERROR(CheckAll("retrieve", load->outcomes.get(), ChunkResult::kRetrieved));
    return seconds;
  };
  auto store = [&]() -> Result<double> {
    const std::vector<ChunkBlocks> fresh = run.Fresh(n);
    const auto start = Clock::now();
    Result<GpuTransfer> save = client.StoreOnStream(reg.id, fresh, engine.board, engine.stream);
    if (!save.ok()) return save.status();
    KVSTASH_RETURN_IF_ERROR(engine.board.WaitReusable(engine.stream, save->signal));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(engine.last, engine.stream));
    KVSTASH_RETURN_IF_ERROR(SpinOn(engine.last));
    const double seconds = Seconds(start);
    KVSTASH_RETURN_IF_ERROR(CheckAll("store", save->outcomes.get(), ChunkResult::kStored));
    return seconds;
  };
  // Layer-wise (before the stores, which may evict what it reads): one
  // range per layer.
  auto layer_wise = [&]() -> Status {
    const uint32_t ranges = std::min(layers, kMaxLayerRanges);
    std::vector<double> first_us, last_us, raw_us;
    for (int r = -1; r < reps; ++r) {
      const auto start = Clock::now();
      Result<GpuTransfer> load =
          client.RetrieveOnStream(reg.id, targets, engine.board, engine.stream, 0, 0, ranges);
      if (!load.ok()) return load.status();
      KVSTASH_RETURN_IF_ERROR(engine.board.WaitLayerRange(engine.stream, load->signal, 0));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(engine.first, engine.stream));
      KVSTASH_RETURN_IF_ERROR(engine.board.WaitLayerRange(engine.stream, load->signal, ranges - 1));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(engine.last, engine.stream));
      KVSTASH_RETURN_IF_ERROR(SpinOn(engine.first));
      const double first = Seconds(start);
      KVSTASH_RETURN_IF_ERROR(SpinOn(engine.last));
      const double last = Seconds(start);
      KVSTASH_RETURN_IF_ERROR(
          CheckAll("layer-wise retrieve", load->outcomes.get(), ChunkResult::kRetrieved));
      Result<double> raw_one = raw.Seconds(RawCopy::Way::kHostToDevice, bytes);
      if (!raw_one.ok()) return raw_one.status();
      if (r < 0) continue;
      first_us.push_back(first * 1e6);
      last_us.push_back(last * 1e6);
      raw_us.push_back(*raw_one * 1e6);
    }
    const double raw_p50 = Median(raw_us);
    const std::string what =
        layout + " x" + std::to_string(n) + ", " + std::to_string(ranges) + " ranges";
    // Target: usable within the raw copy time / L + 60 us (ratio <= 1).
    out.latency.push_back({"first layer, " + what, Percentile(first_us, 0.5),
                           Percentile(first_us, 0.9), "raw copy / L + 60 us", raw_p50 / ranges + 60,
                           1.0});
    out.latency.push_back({"last layer, " + what, Percentile(last_us, 0.5),
                           Percentile(last_us, 0.9), "raw H2D copy", raw_p50, 0});
    return Status::Ok();
  };
  const std::vector<uint32_t> blocks = BlocksOf(targets);
  for (const bool is_store : {false, true}) {
    if (is_store) KVSTASH_RETURN_IF_ERROR(layer_wise());
    const RawCopy::Way way = is_store ? RawCopy::Way::kDeviceToHost : RawCopy::Way::kHostToDevice;
    std::vector<double> seconds, raw_seconds, base_seconds, raw_ratios, base_ratios;
    for (int r = -1; r < reps; ++r) {  // the first of each untimed
      Result<double> one = is_store ? store() : retrieve();
      if (!one.ok()) return one.status();
      Result<double> raw_one = raw.Seconds(way, bytes);
      if (!raw_one.ok()) return raw_one.status();
      Result<double> base_one =
          is_store ? engine.baseline.Save(blocks) : engine.baseline.Load(blocks);
      if (!base_one.ok()) return base_one.status();
      if (r < 0) continue;
      seconds.push_back(*one);
      raw_seconds.push_back(*raw_one);
      base_seconds.push_back(*base_one);
      raw_ratios.push_back(*raw_one / *one);
      base_ratios.push_back(*base_one / *one);
    }
    const std::string op = is_store ? "store (engine-visible)" : "retrieve (engine-visible)";
    ThroughputRow row{layout, reg.chunk_bytes, op, n, bytes};
    row.seconds = Median(seconds);
    row.raw_seconds = Median(raw_seconds);
    row.ratio_median = Median(raw_ratios);
    row.ratio_p10 = Percentile(raw_ratios, 0.1);
    row.ratio_p90 = Percentile(raw_ratios, 0.9);
    row.samples = reps;
    row.target = EngineTarget(reg.chunk_bytes, is_store, n);
    out.throughput.push_back(row);
    // The same kvstash times against the in-process baseline ("raw" column:
    // the baseline); above 1: kvstash is faster than doing it yourself.
    ThroughputRow versus = row;
    versus.op = is_store ? "store (engine) vs in-process baseline"
                         : "retrieve (engine) vs in-process baseline";
    versus.raw_seconds = Median(base_seconds);
    versus.ratio_median = Median(base_ratios);
    versus.ratio_p10 = Percentile(base_ratios, 0.1);
    versus.ratio_p90 = Percentile(base_ratios, 0.9);
    versus.target = 1.0;
    out.throughput.push_back(versus);
  }

  return Status::Ok();
}

// The measurements of one registered layout.
Status MeasureRegistered(Client& client, const CudaBenchLayout& layout,
                         const CudaBenchConfig& config, RawCopy& raw, EngineSide& engine,
                         const RegisteredKv& reg, uint32_t num_blocks, uint32_t max_chunks,
                         CudaBenchResults& out) {
  std::vector<uint32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0u);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
  LayoutRun run(client, reg, blocks, max_chunks);

  std::vector<ChunkBlocks> readable;  // stored once, retrieved again and again
  for (uint32_t n : config.chunk_counts) {
    const uint64_t bytes = n * reg.chunk_bytes;
    const int reps = Reps(n);
    const double one_way_target = n == 1 ? 0.8 : 0.95;
    auto measure = [&](const std::string& op, uint64_t moved, double target, RawCopy::Way way,
                       auto request) {
      ThroughputRow row{layout.name, reg.chunk_bytes, op, n, moved};
      row.target = target;
      KVSTASH_RETURN_IF_ERROR(MeasurePairs(reps, request, raw, way, bytes, row));
      out.throughput.push_back(row);
      return Status::Ok();
    };
    // With multi-path copies on, each store and retrieve row is also set
    // against one link: MeasurePairs timed the raw copy of the same bytes
    // (D2H, H2D) beside each request (one untimed pair first).
    const auto against_one_link = [&](const std::string& op, uint64_t relayed_before) {
      if (out.multipath_paths <= 1) return;
      const ThroughputRow& r = out.throughput.back();
      MultipathRow m{layout.name, op, reg.chunk_bytes, n, r.gbps(), r.raw_gbps(), r.ratio()};
      m.relay_share = double(RelayBytes(client, op) - relayed_before) / double((reps + 1) * bytes);
      m.target = MultipathTarget(reg.chunk_bytes, n, out.multipath_paths, op == "store");
      out.multipath.push_back(m);
    };
    const bool multipath = out.multipath_paths > 1;
    const uint64_t stored_before = multipath ? RelayBytes(client, "store") : 0;
    KVSTASH_RETURN_IF_ERROR(measure("store", bytes, one_way_target, RawCopy::Way::kDeviceToHost,
                                    [&] { return run.Store(run.Fresh(n)); }));
    against_one_link("store", stored_before);
    readable = run.Fresh(n);
    KVSTASH_RETURN_IF_ERROR(run.Store(readable));
    const std::vector<ChunkBlocks> targets = run.Into(readable);
    const uint64_t retrieved_before = multipath ? RelayBytes(client, "retrieve") : 0;
    KVSTASH_RETURN_IF_ERROR(measure("retrieve", bytes, one_way_target, RawCopy::Way::kHostToDevice,
                                    [&] { return run.Retrieve(targets); }));
    against_one_link("retrieve", retrieved_before);
    KVSTASH_RETURN_IF_ERROR(measure("concurrent", 2 * bytes, 0.9, RawCopy::Way::kBoth,
                                    [&] { return run.Both(run.Fresh(n), targets); }));
    if (config.engine_visible) {
      KVSTASH_RETURN_IF_ERROR(MeasureEngineVisible(client, reg, run, engine, raw, layout.name,
                                                   layout.layers, n, targets, out));
    }
  }

  // The engine-visible stores above pass up to 11 x 64 fresh chunks through
  // the pool and may have evicted `readable`: the latency loops read chunks
  // stored right before them.
  readable = run.Fresh(std::min<uint32_t>(max_chunks, 64));
  KVSTASH_RETURN_IF_ERROR(run.Store(readable));
  // Latency of a one-chunk retrieve, beside the raw copy of that chunk.
  const std::vector<ChunkBlocks> one = run.Into({readable.front()});
  std::vector<double> micros;
  for (int i = 0; i < config.latency_samples / 4; ++i) {
    const auto start = Clock::now();
    KVSTASH_RETURN_IF_ERROR(run.Retrieve(one));
    micros.push_back(Seconds(start) * 1e6);
  }
  Result<double> raw_one = raw.MedianSeconds(RawCopy::Way::kHostToDevice, reg.chunk_bytes, 50);
  if (!raw_one.ok()) return raw_one.status();
  out.latency.push_back({"retrieve 1 chunk, " + layout.name, Percentile(micros, 0.5),
                         Percentile(micros, 0.99), "raw H2D copy of the chunk", *raw_one * 1e6, 0});

  if (layout.name == CudaBenchLayouts().front().name) {
    // A 64-key lookup that hits every key (and pins them, released untimed).
    std::vector<ChunkKey> keys;
    for (const ChunkBlocks& c : readable) keys.push_back(c.key);
    keys.resize(std::min<size_t>(keys.size(), 64));
    micros.clear();
    for (int i = 0; i < config.latency_samples; ++i) {
      const auto start = Clock::now();
      auto hit = client.Lookup(reg.id, keys).get();
      micros.push_back(Seconds(start) * 1e6);
      if (!hit.ok()) return hit.status();
      if (hit->hit_chunks != keys.size()) return Status::Internal("lookup missed stored keys");
      if (hit->lease_id != 0) (void)client.Release(hit->lease_id).get();
    }
    out.latency.push_back({std::to_string(keys.size()) + "-key lookup", Percentile(micros, 0.5),
                           Percentile(micros, 0.99), "", 0, 1.5});
  }
  return Status::Ok();
}

Status MeasureLayout(Client& client, const CudaBenchLayout& layout, const CudaBenchConfig& config,
                     RawCopy& raw, CudaBenchResults& out) {
  const uint32_t max_chunks =
      *std::max_element(config.chunk_counts.begin(), config.chunk_counts.end());
  const uint32_t chunk_tokens = client.server_info().chunk_tokens;
  const uint32_t per_chunk = chunk_tokens / layout.block_tokens;
  const uint32_t num_blocks = 2 * max_chunks * per_chunk;
  Result<CudaBenchKv> kv = CudaBenchKv::Create(layout, num_blocks);
  if (!kv.ok()) return kv.status();
  RegisterOptions options;
  options.model = "kvstash-bench-cuda-" + layout.name;
  KVSTASH_RETURN_IF_ERROR(AddCudaLayers(kv->Layers(), options));
  int device = 0;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  Result<std::unique_ptr<CompletionBoard>> board = CompletionBoard::Create(kMaxBoardSlots, device);
  if (!board.ok()) return board.status();
  options.board = (*board)->shm();
  std::vector<const uint8_t*> layer_bases;
  for (const CudaLayer& l : kv->Layers())
    layer_bases.push_back(static_cast<const uint8_t*>(l.data));
  Result<std::unique_ptr<BaselineCopy>> baseline = BaselineCopy::Create(
      layer_bases, kv->geometry(), max_chunks * (chunk_tokens / layout.block_tokens));
  if (!baseline.ok()) return baseline.status();
  Result<cuda::Stream> stream = cuda::Stream::Create();
  Result<cuda::Event> first = cuda::Event::Create(cuda::Event::Wait::kSpin);
  Result<cuda::Event> last = cuda::Event::Create(cuda::Event::Wait::kSpin);
  if (!stream.ok() || !first.ok() || !last.ok()) {
    return !stream.ok() ? stream.status() : !first.ok() ? first.status() : last.status();
  }
  const std::unique_ptr<std::ofstream> samples = SampleFile();
  EngineSide engine{**board, stream->get(), first->get(), last->get(), **baseline, samples.get()};
  auto reg = client.RegisterKV(options).get();
  if (!reg.ok()) return reg.status();
  // Whatever happens below, the layout leaves nothing in the daemon: a
  // failed layout's chunks must not shrink the next layout's pool.
  const Status measured =
      MeasureRegistered(client, layout, config, raw, engine, *reg, num_blocks, max_chunks, out);
  const Status unregistered = client.UnregisterKV(reg->id).get();
  auto cleared = client.Clear(options.model).get();
  if (!measured.ok()) return measured;
  if (!unregistered.ok()) return unregistered;
  return cleared.ok() ? Status::Ok() : cleared.status();
}

// Requests back to back (`one` issues one of `bytes` and waits for it) from
// the wall-clock instant `at` for `seconds`.
template <typename Op>
Result<InStepPhase> RunPhase(std::chrono::system_clock::time_point at, double seconds,
                             uint64_t bytes, Op one) {
  using std::chrono::system_clock;
  const auto ns = [](system_clock::duration d) {
    return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  const auto now = system_clock::now();
  if (now > at) {
    return Status::TimedOut(
        "this process was ready " + std::to_string(ns(now - at) / 1000000) +
        " ms after the phase's instant: give --in-step-at more time from the start");
  }
  std::this_thread::sleep_until(at);
  InStepPhase phase;
  const auto began = system_clock::now();
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  do {
    KVSTASH_RETURN_IF_ERROR(one());
    ++phase.requests;
    phase.bytes += bytes;
  } while (Clock::now() < until);
  const auto ended = system_clock::now();
  phase.start_unix_ns = ns(began.time_since_epoch());
  phase.end_unix_ns = ns(ended.time_since_epoch());
  phase.late_ns = ns(began - at);
  return phase;
}

// One layout and chunk count in step with other processes: store and warm
// up, then from the instant, each phase as long and the next 1 s after it:
// retrieves, the raw H2D copy of the same bytes, stores of fresh chunks
// (the pool evicts the oldest as it fills), the raw D2H copy.
Status MeasureInStep(Client& client, const CudaBenchConfig& config, CudaBenchResults& out) {
  if (config.layouts.size() != 1 || config.chunk_counts.size() != 1) {
    return Status::InvalidArgument(
        "--in-step-at measures one layout and one chunk count: name one of each "
        "(--layouts, --chunk-counts)");
  }
  const std::vector<CudaBenchLayout> all = CudaBenchLayouts();
  const auto layout = std::find_if(all.begin(), all.end(), [&](const CudaBenchLayout& l) {
    return l.name == config.layouts[0];
  });
  if (layout == all.end())
    return Status::InvalidArgument("no bench layout named " + config.layouts[0]);
  if (config.in_step_seconds <= 0)
    return Status::InvalidArgument("--in-step-seconds must be above 0");
  const uint32_t n = config.chunk_counts[0];
  const uint32_t per_chunk = client.server_info().chunk_tokens / layout->block_tokens;
  const uint32_t num_blocks = 2 * n * per_chunk;
  Result<CudaBenchKv> kv = CudaBenchKv::Create(*layout, num_blocks);
  if (!kv.ok()) return kv.status();
  RegisterOptions options;
  // Its own model name: the other processes' Clear must not drop its chunks.
  options.model = "kvstash-bench-cuda-" + layout->name + "-" + std::to_string(::getpid());
  KVSTASH_RETURN_IF_ERROR(AddCudaLayers(kv->Layers(), options));
  auto reg = client.RegisterKV(options).get();
  if (!reg.ok()) return reg.status();
  const Status measured = [&]() -> Status {
    std::vector<uint32_t> blocks(num_blocks);
    std::iota(blocks.begin(), blocks.end(), 0u);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
    LayoutRun run(client, *reg, blocks, n);
    const std::vector<ChunkBlocks> stored = run.Fresh(n);
    KVSTASH_RETURN_IF_ERROR(run.Store(stored));
    const std::vector<ChunkBlocks> targets = run.Into(stored);
    const uint64_t bytes = uint64_t(n) * reg->chunk_bytes;
    for (int i = 0; i < 3; ++i) KVSTASH_RETURN_IF_ERROR(run.Retrieve(targets));
    for (int i = 0; i < 3; ++i) KVSTASH_RETURN_IF_ERROR(run.Store(run.Fresh(n)));
    Result<RawCopy> raw = RawCopy::Create(std::min<uint64_t>(n, 16) * reg->chunk_bytes);
    if (!raw.ok()) return raw.status();
    KVSTASH_RETURN_IF_ERROR(raw->Seconds(RawCopy::Way::kHostToDevice, bytes).status());
    KVSTASH_RETURN_IF_ERROR(raw->Seconds(RawCopy::Way::kDeviceToHost, bytes).status());
    const auto first =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(config.in_step_at_unix_ms));
    // Every process computes the same instants.
    const auto apart = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(config.in_step_seconds + 1));
    const auto raw_copy = [&](RawCopy::Way way) {
      return [&raw, way, bytes] { return raw->Seconds(way, bytes).status(); };
    };
    struct Phase {
      const char* op;
      const char* relayed;  // the direction of the peers' bytes counted; null: a raw copy
      std::function<Status()> one;
    };
    const Phase phases[] = {
        {"retrieve", "retrieve", [&] { return run.Retrieve(targets); }},
        {"raw H2D copy", nullptr, raw_copy(RawCopy::Way::kHostToDevice)},
        {"store", "store", [&] { return run.Store(run.Fresh(n)); }},
        {"raw D2H copy", nullptr, raw_copy(RawCopy::Way::kDeviceToHost)},
    };
    for (size_t i = 0; i < std::size(phases); ++i) {
      const Phase& p = phases[i];
      const uint64_t relayed_before = p.relayed != nullptr ? RelayBytes(client, p.relayed) : 0;
      Result<InStepPhase> phase =
          RunPhase(first + apart * long(i), config.in_step_seconds, bytes, p.one);
      if (!phase.ok()) return phase.status();
      phase->op = p.op;
      if (p.relayed != nullptr) phase->relay_bytes = RelayBytes(client, p.relayed) - relayed_before;
      phase->layout = layout->name;
      phase->chunk_bytes = reg->chunk_bytes;
      phase->chunks = n;
      out.in_step.push_back(*phase);
    }
    return Status::Ok();
  }();
  const Status unregistered = client.UnregisterKV(reg->id).get();
  auto cleared = client.Clear(options.model).get();
  if (!measured.ok()) return measured;
  if (!unregistered.ok()) return unregistered;
  return cleared.ok() ? Status::Ok() : cleared.status();
}

}  // namespace

Result<CudaBenchResults> RunCudaBench(Client& client, const CudaBenchConfig& config) {
  CudaBenchResults out;
  Result<json> described = DescribeWhenReady(client);
  if (!described.ok()) return described.status();
  const json& backend = (*described)["backend"];
  out.transfer_mode = backend.value("transfer_mode", "");
  out.gpu = backend["devices"].empty() ? "" : backend["devices"][0].value("name", "");
  out.chunk_tokens = client.server_info().chunk_tokens;
  if (config.chunk_counts.empty()) return Status::InvalidArgument("no chunk counts to measure");
  if (backend.contains("multipath")) {
    const json& multipath = backend["multipath"];
    out.multipath_state = multipath.value("state", "");
    size_t relays = 0;  // GPUs that carry their peers' copies (one entry per direction)
    for (const json& h : multipath.value("relays", json::array()))
      relays += h.value("direction", "") == "retrieve" ? 1 : 0;
    if (out.multipath_state.rfind("on", 0) == 0 && relays >= 2) {
      out.multipath_paths = uint32_t(relays);  // every GPU of an NVLink node helps the others
    }
  }
  if (config.in_step_at_unix_ms > 0) {
    out.in_step_run = true;
    if (Status s = MeasureInStep(client, config, out); !s.ok()) out.errors.push_back(s.ToString());
    return out;
  }

  // The floor of every request: a raw ZeroMQ round trip of a lookup's size.
  constexpr size_t kLookupMessageBytes = 64 * 32 + 128;
  Result<std::vector<double>> zmq = ZmqRoundTripsUs(kLookupMessageBytes, config.latency_samples);
  if (!zmq.ok()) return zmq.status();
  const double zmq_p50 = Percentile(*zmq, 0.5);
  out.latency.push_back({"raw ZeroMQ round trip", zmq_p50, Percentile(*zmq, 0.99), "", 0, 0});
  std::vector<double> pings;
  for (int i = 0; i < config.latency_samples; ++i) {
    const auto start = Clock::now();
    auto ping = client.Ping().get();
    if (!ping.ok()) return ping.status();
    pings.push_back(Seconds(start) * 1e6);
  }
  out.latency.push_back({"ping", Percentile(pings, 0.5), Percentile(pings, 0.99),
                         "raw ZeroMQ round trip", zmq_p50, 0});

  const uint32_t max_chunks =
      *std::max_element(config.chunk_counts.begin(), config.chunk_counts.end());
  uint64_t largest_chunk = 0;
  for (const CudaBenchLayout& l : CudaBenchLayouts()) {
    largest_chunk =
        std::max<uint64_t>(largest_chunk, uint64_t(l.kv_count) * l.layers * out.chunk_tokens *
                                              l.kv_heads * l.head_dim * DTypeBytes(l.dtype));
  }
  // Copies longer than the raw buffers repeat them back to back.
  Result<RawCopy> raw = RawCopy::Create(std::min<uint64_t>(max_chunks, 16) * largest_chunk);
  if (!raw.ok()) return raw.status();
  for (const CudaBenchLayout& layout : CudaBenchLayouts()) {
    if (!config.layouts.empty() && std::find(config.layouts.begin(), config.layouts.end(),
                                             layout.name) == config.layouts.end()) {
      continue;
    }
    if (Status s = MeasureLayout(client, layout, config, *raw, out); !s.ok()) {
      out.errors.push_back(layout.name + ": " + s.ToString());
    }
  }
  // Time spent inside the daemon, from its own latency figures, for the
  // requests only the latency loops send.
  auto stats = client.Stats().get();
  if (stats.ok()) {
    const json latency = json::parse(stats->json)["latency"];
    for (LatencyRow& row : out.latency) {
      const char* kind = row.name == "ping"                             ? "ping"
                         : row.name.find("lookup") != std::string::npos ? "lookup"
                                                                        : "";
      if (*kind && latency.contains(kind)) row.daemon_mean_us = latency[kind].value("mean_us", 0.0);
    }
  }
  for (LatencyRow& row : out.latency) {
    if (row.target > 0 && row.reference.empty()) {
      row.reference = "raw ZeroMQ round trip";
      row.reference_us = zmq_p50;
    }
  }

  described = DescribeWhenReady(client);
  if (described.ok()) {
    for (const json& d : (*described)["backend"]["devices"]) {
      out.daemon_gpu_memory_bytes += d.value("staging_bytes", uint64_t{0});
      out.daemon_plan_bytes += d.value("plan_bytes", uint64_t{0});
    }
  }
  for (const ThroughputRow& r : out.throughput) {
    if (r.ratio() < r.target) {
      out.short_of_targets.push_back(r.layout + " " + r.op + " x" + std::to_string(r.chunks) +
                                     ": " + std::to_string(r.ratio()) + " of raw < " +
                                     std::to_string(r.target));
    }
  }
  for (const MultipathRow& m : out.multipath) {
    if (m.target > 0 && m.ratio < m.target) {
      out.short_of_targets.push_back(m.layout + " multi-path " + m.op + " x" +
                                     std::to_string(m.chunks) + ": " + std::to_string(m.ratio) +
                                     " of one link < " + std::to_string(m.target));
    }
  }
  for (const LatencyRow& r : out.latency) {
    if (r.target > 0 && r.ratio() > r.target) {
      out.short_of_targets.push_back(r.name + ": p50 " + std::to_string(r.ratio()) + "x the " +
                                     r.reference + " > " + std::to_string(r.target));
    }
  }
  if (out.transfer_mode == "direct" && out.daemon_gpu_memory_bytes != 0) {
    out.short_of_targets.push_back("direct mode holds " +
                                   std::to_string(out.daemon_gpu_memory_bytes) +
                                   " bytes of GPU staging, not 0");
  }
  return out;
}

}  // namespace kvstash::bench
