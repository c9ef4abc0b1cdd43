// The daemon's logger ("kvstashd", set up by its main), or spdlog's default
// one where no main set it up (tests, benchmarks).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace kvstash::backends {

inline std::shared_ptr<spdlog::logger> Logger() {
  auto logger = spdlog::get("kvstashd");
  return logger ? logger : spdlog::default_logger();
}

}  // namespace kvstash::backends
