// The Describe and Stats JSON documents (also read by `kvstash describe` /
// `kvstash stats` and the metrics endpoint).
#include <nlohmann/json.hpp>

#include "kvstash/version.h"
#include "service.h"

namespace kvstash::server {

namespace {

using nlohmann::json;

std::string LayerRange(const std::vector<uint32_t>& layers) {
  // "0-31" for a contiguous run, "0,2,4" otherwise.
  bool contiguous = true;
  for (size_t i = 1; i < layers.size(); ++i) contiguous &= layers[i] == layers[i - 1] + 1;
  if (contiguous && layers.size() > 1) {
    return std::to_string(layers.front()) + "-" + std::to_string(layers.back());
  }
  std::string out;
  for (uint32_t l : layers) out += (out.empty() ? "" : ",") + std::to_string(l);
  return out;
}

json GroupJson(const ChunkGroup& group) {
  const LayerGeometry& g = group.geometry;
  return json{{"layers", LayerRange(group.layers)},
              {"num_layers", group.layers.size()},
              {"dtype", NameOf(g.dtype)},
              {"kv_count", g.kv_count},
              {"num_heads", g.num_heads},
              {"head_bytes", g.head_bytes},
              {"block_tokens", g.block_tokens},
              {"num_blocks", g.num_blocks},
              {"block_stride", g.block_stride},
              {"kv_stride", g.kv_stride},
              {"token_stride", g.token_stride},
              {"head_stride", g.head_stride},
              {"offset_bytes", group.offset_bytes},
              {"size_bytes", group.size_bytes()}};
}

}  // namespace

std::string Service::DescribeJson() const {
  json config = json::object();
  for (const auto& [name, value] : config::EffectiveConfig(config_)) config[name] = value;
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
  json registrations = json::array();
  for (const auto& reg : registry_->List()) {
    json groups = json::array();
    for (const ChunkGroup& group : reg->layout.groups()) groups.push_back(GroupJson(group));
    registrations.push_back(json{{"id", reg->id},
                                 {"model", reg->request.model},
                                 {"tenant_salt", reg->request.tenant_salt},
                                 {"tp_rank", reg->request.tp_rank},
                                 {"tp_size", reg->request.tp_size},
                                 {"device", reg->device},
                                 {"num_layers", reg->layout.num_layers()},
                                 {"chunk_tokens", reg->layout.chunk_tokens()},
                                 {"block_tokens", reg->layout.block_tokens()},
                                 {"chunk_bytes", reg->layout.chunk_bytes()},
                                 {"scope", reg->scope},
                                 {"namespace_id", ToHex(reg->namespace_id)},
                                 {"groups", groups}});
  }
  const ChunkStore::Usage usage = store_->usage();
  json pool{{"capacity_bytes", pool_->capacity_bytes()},
            {"used_bytes", usage.used_bytes},
            {"chunks", usage.chunks},
            {"leases", usage.leases},
            {"slab_bytes", pool_->slab_bytes()},
            {"slabs", pool_->num_slabs()},
            {"slabs_ready", pool_->ready_slabs()},
            {"slabs_failed", pool_->failed_slabs()},
            {"ready_bytes", pool_->ready_bytes()}};
  json doc{{"server",
            {{"version", KVSTASH_VERSION},
             {"protocol_version", proto::kProtocolVersion},
             {"boot_id", ToHex(boot_id_.data(), boot_id_.size())},
             {"backend", backend_->name()},
             {"devices", backend_->num_devices()},
             {"uptime_ms", uptime}}},
           {"config", config},
           {"tiers", json::array({json{{"name", "L1"}, {"kind", "pinned host memory"}, {"pool", pool}}})},
           {"registrations", registrations}};
  return doc.dump();
}

std::string Service::StatsJson() const {
  json counters = json::object();
  for (const Stats::Counter& c : stats_.ReadCounters()) counters[c.name] = c.value;
  const ChunkStore::Usage usage = store_->usage();
  json gauges{{"l1_capacity_bytes", usage.capacity_bytes},
              {"l1_used_bytes", usage.used_bytes},
              {"l1_chunks", usage.chunks},
              {"l1_ready_bytes", pool_->ready_bytes()},
              {"leases_active", usage.leases},
              {"registrations_active", registry_->List().size()},
              {"requests_deferred", deferred_.load()}};
  json latency = json::object();
  for (size_t k = 0; k < size_t(RequestKind::kCount); ++k) {
    const LatencyHistogram::Snapshot s = stats_.latency(RequestKind(k)).Read();
    if (s.count == 0) continue;
    latency[RequestKindName(RequestKind(k))] = json{{"count", s.count},
                                                    {"mean_us", s.sum_us / s.count},
                                                    {"p50_us_le", s.Percentile(0.50)},
                                                    {"p99_us_le", s.Percentile(0.99)}};
  }
  // Rates are derived from counters, never stored.
  const uint64_t keys = counters["lookup_keys"];
  const uint64_t hits = counters["lookup_hit_chunks"];
  json derived{{"lookup_hit_rate", keys ? double(hits) / double(keys) : 0.0},
               {"l1_used_fraction",
                usage.capacity_bytes ? double(usage.used_bytes) / double(usage.capacity_bytes) : 0.0}};
  return json{{"counters", counters}, {"gauges", gauges}, {"latency", latency}, {"derived", derived}}
      .dump();
}

}  // namespace kvstash::server
