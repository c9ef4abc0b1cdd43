// The daemon's Describe and Stats documents rearranged for people, in the
// order an operator reads them: the server, the pool and its tiers, the
// registrations, then counters and latency. Only the text rendering uses
// these; --json prints what the daemon sent. Sections the daemon adds later
// follow in its own order.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvstash::cli {

// server, backend, tiers (the pool), registrations, config, then the rest.
nlohmann::ordered_json DescribeView(const nlohmann::ordered_json& describe);

// pool (the gauges), registrations, counters, hit rates, then latency as a
// table of requests with count and mean, p50 and p99 in µs.
nlohmann::ordered_json StatsView(const nlohmann::ordered_json& stats);

// Renders a view section by section in its order ("# title" each), where
// RenderJson would put every top-level scalar first.
std::string RenderSections(const nlohmann::ordered_json& view);

}  // namespace kvstash::cli
