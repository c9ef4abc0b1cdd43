// The metrics endpoint's body: a StatsSnapshot in the Prometheus text
// exposition format 0.0.4. The same counters and gauges as `kvstash stats`,
// under stable names (docs/deployment.md, "Metrics"):
//   kvstash_<counter>_total                      every KVSTASH_COUNTERS entry
//   kvstash_<gauge>                              every snapshot gauge
//   kvstash_request_duration_seconds{request=}   histogram per request kind
//   kvstash_registration_<counter>_total{registration=,model=,tp_rank=}
// Pure: no I/O, no locks.
#pragma once

#include <string>

#include "stats.h"

namespace kvstash::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string PrometheusText(const StatsSnapshot& snapshot);

}  // namespace kvstash::server
