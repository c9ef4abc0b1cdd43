// How `kvstash bench` reports its results: a readable summary ending in
// PASS or FAIL, or JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kvstash/bench/bench_workload.h"

namespace kvstash::bench {

// The q-quantile (0..1) of values, 0 when empty.
double Percentile(std::vector<double> values, double q);

std::string BenchText(const BenchConfig& config, const BenchResults& results);
nlohmann::ordered_json BenchJson(const BenchConfig& config, const BenchResults& results);

}  // namespace kvstash::bench
