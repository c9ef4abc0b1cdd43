// The daemon's logger ("kvstashd", set up by main), or spdlog's default one
// where main did not run (tests).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace kvstash::server {

inline std::shared_ptr<spdlog::logger> Logger() {
  auto logger = spdlog::get("kvstashd");
  return logger ? logger : spdlog::default_logger();
}

}  // namespace kvstash::server
