// The Describe and Stats JSON documents (also read by `kvstash describe` /
// `kvstash stats` and the metrics endpoint), their sections in the order an
// operator reads them: the server, the pool and tiers, the registrations,
// then counters and latency (ordered_json keeps the order written).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string_view>
#include <variant>

#include "introspection.h"
#include "kvstash/version.h"

namespace kvstash::server {

namespace {

using json = nlohmann::ordered_json;

// The config's values typed as JSON: numbers as numbers, text as strings.
json ConfigJson(const config::ServerConfig& config) {
  json out = json::object();
  for (const auto& [name, value] : config::EffectiveConfigValues(config)) {
    std::visit([&, name = name](const auto& v) { out[name] = v; }, value);
  }
  return out;
}

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
  return json{{"layers", LayerRange(group.layers)}, {"num_layers", group.layers.size()},
              {"dtype", NameOf(g.dtype)},           {"kv_count", g.kv_count},
              {"num_heads", g.num_heads},           {"head_bytes", g.head_bytes},
              {"block_tokens", g.block_tokens},     {"num_blocks", g.num_blocks},
              {"block_stride", g.block_stride},     {"kv_stride", g.kv_stride},
              {"token_stride", g.token_stride},     {"head_stride", g.head_stride},
              {"offset_bytes", group.offset_bytes}, {"size_bytes", group.size_bytes()}};
}

// Per tier below L1: usage, counters, operation latency.
json TierStatsJson(const std::vector<TierSnapshot>& tiers) {
  json out = json::object();
  for (const TierSnapshot& t : tiers) {
    json counters = json::object();
    for (const Stats::Counter& c : t.counters) counters[c.name] = c.value;
    json latency = json::object();
    for (const auto& [op, s] :
         {std::pair{"put", &t.put_latency}, std::pair{"get", &t.get_latency}}) {
      if (s->count == 0) continue;
      latency[op] = json{{"count", s->count},
                         {"mean_us", s->sum_us / s->count},
                         {"p50_us", s->Percentile(0.50)},
                         {"p99_us", s->Percentile(0.99)}};
    }
    out[t.level] = json{{"tier", t.name},
                        {"capacity_bytes", t.capacity_bytes},
                        {"used_bytes", t.used_bytes},
                        {"chunks", t.chunks},
                        {"counters", counters},
                        {"latency", latency}};
  }
  return out;
}

// The pool, then the tiers below it, L1 first.
json TiersJson(const Backend& backend, const L1Pool& pool, const ChunkStore::Usage& usage,
               const TierChain& below) {
  json l1_pool{{"capacity_bytes", pool.capacity_bytes()},
               {"used_bytes", usage.used_bytes},
               {"chunks", usage.chunks},
               {"leases", usage.leases},
               {"slab_bytes", pool.slab_bytes()},
               {"slabs", pool.num_slabs()},
               {"slabs_ready", pool.ready_slabs()},
               {"slabs_failed", pool.failed_slabs()},
               {"ready_bytes", pool.ready_bytes()}};
  // The host backend touches its slabs; only the CUDA backend pins them.
  const bool pinned = std::string_view(backend.name()) == "cuda";
  json tiers = json::array();
  tiers.push_back(json{
      {"name", "L1"}, {"kind", pinned ? "pinned host memory" : "host memory"}, {"pool", l1_pool}});
  nlohmann::json lower = nlohmann::json::array();
  below.Describe(lower);  // L2, L3
  for (const nlohmann::json& tier : lower) tiers.push_back(json(tier));
  return tiers;
}

}  // namespace

std::string Introspection::DescribeJson(const PeerId& viewer, bool admin) const {
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
  json registrations = json::array();
  uint64_t others = 0;
  for (const auto& reg : registry_->List()) {
    if (!admin && reg->owner != viewer) {
      ++others;
      continue;
    }
    json groups = json::array();
    for (const ChunkGroup& group : reg->layout.groups()) groups.push_back(GroupJson(group));
    registrations.push_back(json{{"id", reg->id},
                                 {"model", reg->request.model},
                                 {"tenant", !reg->request.tenant_salt.empty()},
                                 {"tp_rank", reg->request.tp_rank},
                                 {"tp_size", reg->request.tp_size},
                                 {"replicated_across_ranks", reg->request.replicated_across_ranks},
                                 {"device", reg->device},
                                 {"num_layers", reg->layout.num_layers()},
                                 {"chunk_tokens", reg->layout.chunk_tokens()},
                                 {"block_tokens", reg->layout.block_tokens()},
                                 {"chunk_bytes", reg->layout.chunk_bytes()},
                                 {"scope", reg->scope},
                                 {"groups", groups}});
  }
  nlohmann::json backend = nlohmann::json::object();
  backend_->Describe(backend);
  json doc{{"server",
            {{"version", KVSTASH_VERSION},
             {"protocol_version", proto::kProtocolVersion},
             {"boot_id", ToHex(boot_id_.data(), boot_id_.size())},
             {"backend", backend_->name()},
             {"devices", backend_->num_devices()},
             {"uptime_ms", uptime}}},
           {"backend", json(backend)},
           {"tiers", TiersJson(*backend_, *pool_, store_->usage(), *tiers_)},
           {"registrations", registrations},
           // Registrations of other connections, which a non-admin sees only
           // counted (docs/protocol.md "Trust").
           {"other_registrations", others},
           {"viewer_is_admin", admin},
           {"config", ConfigJson(config_)}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on bad UTF-8
}

StatsSnapshot Introspection::ReadStats() const {
  StatsSnapshot s;
  s.counters = stats_.ReadCounters();
  // Describe and Stats in flight (this one, if it is a Stats) are not
  // transfers: the gauge counts Store, Retrieve and UnregisterKV.
  const uint64_t deferred = deferred_.count();
  const ChunkStore::Usage usage = store_->usage();
  const std::vector<std::shared_ptr<Registration>> registrations = registry_->List();
  s.gauges = {{"l1_capacity_bytes", "bytes of the L1 pool", usage.capacity_bytes},
              {"l1_used_bytes", "bytes of L1 slots holding chunks", usage.used_bytes},
              {"l1_chunks", "chunks in L1", usage.chunks},
              {"l1_ready_bytes", "bytes of L1 pinned and ready to use", pool_->ready_bytes()},
              {"l1_slabs", "L1 slabs (the pinning unit)", pool_->num_slabs()},
              {"l1_slabs_ready", "L1 slabs pinned and ready to use", pool_->ready_slabs()},
              {"l1_slabs_failed", "L1 slabs that could not be pinned", pool_->failed_slabs()},
              {"leases_active", "lookup leases held", usage.leases},
              {"registrations_active", "registered engine ranks", registrations.size()},
              {"requests_deferred", "Store, Retrieve and UnregisterKV requests in flight",
               deferred - std::min(deferred, introspecting_.load())}};
  for (size_t k = 0; k < s.latency.size(); ++k)
    s.latency[k] = stats_.latency(RequestKind(k)).Read();
  s.tiers = tiers_->ReadStats();
  for (const auto& reg : registrations) {
    s.registrations.push_back(
        {reg->id, reg->request.model, reg->request.tp_rank, reg->stats.ReadCounters(), reg->owner});
  }
  return s;
}

std::string Introspection::StatsJson(const PeerId& viewer, bool admin) const {
  const StatsSnapshot snapshot = ReadStats();
  json counters = json::object();
  for (const Stats::Counter& c : snapshot.counters) counters[c.name] = c.value;
  json gauges = json::object();
  for (const Gauge& g : snapshot.gauges) gauges[g.name] = g.value;
  // The figures of the tiers below L1, by tier name; none while no tier is
  // configured.
  json tiers = TierStatsJson(snapshot.tiers);
  json latency = json::object();
  for (size_t k = 0; k < snapshot.latency.size(); ++k) {
    const LatencyHistogram::Snapshot& s = snapshot.latency[k];
    if (s.count == 0) continue;
    // p50 and p99 are the upper bounds of the histogram's buckets.
    latency[RequestKindName(RequestKind(k))] = json{{"count", s.count},
                                                    {"mean_us", s.sum_us / s.count},
                                                    {"p50_us", s.Percentile(0.50)},
                                                    {"p99_us", s.Percentile(0.99)}};
  }
  // As in Describe: a non-admin sees its own registrations' counters and
  // counts the others' (their ids and models are theirs).
  json registrations = json::array();
  uint64_t others = 0;
  for (const StatsSnapshot::Registration& reg : snapshot.registrations) {
    if (!admin && reg.owner != viewer) {
      ++others;
      continue;
    }
    json reg_counters = json::object();
    for (const Stats::Counter& c : reg.counters) reg_counters[c.name] = c.value;
    registrations.push_back(json{{"id", reg.id},
                                 {"model", reg.model},
                                 {"tp_rank", reg.tp_rank},
                                 {"counters", reg_counters}});
  }
  // Rates are derived from counters, never stored.
  const uint64_t keys = counters["lookup_keys"];
  const uint64_t hits = counters["lookup_hit_chunks"];
  const uint64_t used = gauges["l1_used_bytes"];
  const uint64_t capacity = gauges["l1_capacity_bytes"];
  json derived{{"lookup_hit_rate", keys ? double(hits) / double(keys) : 0.0},
               {"l1_used_fraction", capacity ? double(used) / double(capacity) : 0.0}};
  return json{{"gauges", gauges},
              {"tiers", tiers},
              {"per_registration", registrations},
              {"other_registrations", others},
              {"viewer_is_admin", admin},
              {"counters", counters},
              {"derived", derived},
              {"latency", latency}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvstash::server
