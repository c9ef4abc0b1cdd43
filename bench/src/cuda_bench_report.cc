// Text and JSON reports of `kvstash bench --backend cuda`.
#include <cstdarg>
#include <cstdio>

#include "kvstash/bench/cuda_bench.h"

namespace kvstash::bench {

namespace {

std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* format, ...) {
  char text[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

const char* Mark(bool met) { return met ? "ok" : "SHORT"; }

std::string InStepText(const CudaBenchResults& r) {
  std::string out =
      "in step with other processes: requests back to back from an instant; wall clock in "
      "Unix ns, GB/s over each phase's own interval\n";
  if (!r.multipath_state.empty())
    out += "multi-path retrieves and stores: " + r.multipath_state + "\n";
  out += Printf("%-13s %-14s %6s %8s %9s %20s %20s %8s %11s\n", "op", "layout", "chunks",
                "requests", "GB/s", "start", "end", "late us", "peers' GB");
  for (const InStepPhase& p : r.in_step) {
    out += Printf("%-13s %-14s %6u %8u %9.2f %20lld %20lld %8.0f %11.2f\n", p.op.c_str(),
                  p.layout.c_str(), p.chunks, p.requests, p.gbps(),
                  static_cast<long long>(p.start_unix_ns), static_cast<long long>(p.end_unix_ns),
                  double(p.late_ns) / 1e3, double(p.relay_bytes) / 1e9);
  }
  for (const std::string& e : r.errors) out += "error: " + e + "\n";
  out += r.errors.empty() ? "PASS\n" : "FAIL\n";
  return out;
}

}  // namespace

std::string CudaBenchText(const CudaBenchResults& r) {
  std::string out = "kvstash bench --backend cuda: " + r.gpu + ", transfer mode " +
                    r.transfer_mode + ", " + std::to_string(r.chunk_tokens) +
                    " tokens per chunk\n\n";
  if (r.in_step_run) return out + InStepText(r);
  out +=
      "ratio: median over pairs of a request and the raw copy timed after it; p10-p90 of the "
      "pairs beside it\n";
  out += Printf("%-14s %9s %-11s %6s %9s %9s %7s %13s %7s\n", "layout", "chunk", "op", "chunks",
                "GB/s", "raw GB/s", "ratio", "p10-p90", "target");
  for (const ThroughputRow& t : r.throughput) {
    out += Printf("%-14s %6.2f MiB %-11s %6u %9.2f %9.2f %7.3f %6.3f-%-6.3f %5.2f %s\n",
                  t.layout.c_str(), double(t.chunk_bytes) / (1 << 20), t.op.c_str(), t.chunks,
                  t.gbps(), t.raw_gbps(), t.ratio(), t.ratio_p10, t.ratio_p90, t.target,
                  Mark(t.ratio() >= t.target));
  }
  if (!r.multipath_state.empty())
    out += "\nmulti-path retrieves and stores: " + r.multipath_state + "\n";
  if (!r.multipath.empty()) {
    out += Printf("%-14s %9s %-8s %6s %9s %13s %12s %13s %7s\n", "layout", "chunk", "op", "chunks",
                  "GB/s", "one link GB/s", "x one link", "peers' share", "target");
    for (const MultipathRow& m : r.multipath) {
      out += Printf("%-14s %6.2f MiB %-8s %6u %9.2f %13.2f %12.3f %13.2f ", m.layout.c_str(),
                    double(m.chunk_bytes) / (1 << 20), m.op.c_str(), m.chunks, m.gbps,
                    m.one_link_gbps, m.ratio, m.relay_share);
      out += m.target > 0 ? Printf("%5.2f %s\n", m.target, Mark(m.ratio >= m.target)) : "    -\n";
    }
  }
  out += "\n" + Printf("%-32s %9s %9s %9s  %s\n", "latency", "p50 us", "p99 us", "daemon us",
                       "p50 against");
  for (const LatencyRow& l : r.latency) {
    std::string against;
    if (l.reference_us > 0) {
      against = Printf("%.2fx %s (%.1f us)", l.ratio(), l.reference.c_str(), l.reference_us);
      if (l.target > 0)
        against += Printf(", target <= %.1fx %s", l.target, Mark(l.ratio() <= l.target));
    }
    out += Printf("%-32s %9.1f %9.1f %9s  ", l.name.c_str(), l.p50_us, l.p99_us,
                  l.daemon_mean_us > 0 ? Printf("%.0f", l.daemon_mean_us).c_str() : "") +
           against + "\n";
  }
  out +=
      "\n" + Printf("daemon GPU memory: %.1f MiB staging, %.2f MiB plan arenas (as much pinned)\n",
                    double(r.daemon_gpu_memory_bytes) / (1 << 20),
                    double(r.daemon_plan_bytes) / (1 << 20));
  for (const std::string& e : r.errors) out += "error: " + e + "\n";
  for (const std::string& s : r.short_of_targets) out += "short of target: " + s + "\n";
  out += r.passed() ? "PASS\n" : (r.errors.empty() ? "targets missed\n" : "FAIL\n");
  return out;
}

nlohmann::ordered_json CudaBenchJson(const CudaBenchResults& r) {
  nlohmann::ordered_json throughput = nlohmann::ordered_json::array();
  for (const ThroughputRow& t : r.throughput) {
    throughput.push_back({{"layout", t.layout},
                          {"chunk_bytes", t.chunk_bytes},
                          {"op", t.op},
                          {"chunks", t.chunks},
                          {"bytes", t.bytes},
                          {"seconds", t.seconds},
                          {"raw_seconds", t.raw_seconds},
                          {"gbps", t.gbps()},
                          {"raw_gbps", t.raw_gbps()},
                          {"ratio", t.ratio()},
                          {"ratio_p10", t.ratio_p10},
                          {"ratio_p90", t.ratio_p90},
                          {"samples", t.samples},
                          {"target", t.target}});
  }
  nlohmann::ordered_json latency = nlohmann::ordered_json::array();
  for (const LatencyRow& l : r.latency) {
    latency.push_back({{"name", l.name},
                       {"p50_us", l.p50_us},
                       {"p99_us", l.p99_us},
                       {"reference", l.reference},
                       {"reference_us", l.reference_us},
                       {"ratio", l.ratio()},
                       {"target", l.target},
                       {"daemon_mean_us", l.daemon_mean_us}});
  }
  nlohmann::ordered_json multipath = nlohmann::ordered_json::array();
  for (const MultipathRow& m : r.multipath) {
    multipath.push_back({{"layout", m.layout},
                         {"op", m.op},
                         {"chunk_bytes", m.chunk_bytes},
                         {"chunks", m.chunks},
                         {"gbps", m.gbps},
                         {"one_link_gbps", m.one_link_gbps},
                         {"ratio_to_one_link", m.ratio},
                         {"relay_share", m.relay_share},
                         {"target", m.target}});
  }
  nlohmann::ordered_json in_step = nlohmann::ordered_json::array();
  for (const InStepPhase& p : r.in_step) {
    in_step.push_back({{"op", p.op},
                       {"layout", p.layout},
                       {"chunk_bytes", p.chunk_bytes},
                       {"chunks", p.chunks},
                       {"requests", p.requests},
                       {"bytes", p.bytes},
                       {"start_unix_ns", p.start_unix_ns},
                       {"end_unix_ns", p.end_unix_ns},
                       {"late_ns", p.late_ns},
                       {"gbps", p.gbps()},
                       {"relay_bytes", p.relay_bytes}});
  }
  return {{"gpu", r.gpu},
          {"transfer_mode", r.transfer_mode},
          {"in_step", in_step},
          {"multipath_state", r.multipath_state},
          {"multipath_paths", r.multipath_paths},
          {"multipath", multipath},
          {"chunk_tokens", r.chunk_tokens},
          {"throughput", throughput},
          {"latency", latency},
          {"daemon_gpu_memory_bytes", r.daemon_gpu_memory_bytes},
          {"daemon_plan_bytes", r.daemon_plan_bytes},
          {"short_of_targets", r.short_of_targets},
          {"errors", r.errors},
          {"passed", r.passed()}};
}

}  // namespace kvstash::bench
