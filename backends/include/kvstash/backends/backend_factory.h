// Picks the backend named by the config: host, cuda, or auto (cuda where the
// daemon was built with CUDA and a GPU is visible, host otherwise).
#pragma once

#include <memory>

#include "backend.h"
#include "kvstash/config/server_config.h"

namespace kvstash::server {

Result<std::unique_ptr<Backend>> CreateBackend(const config::ServerConfig& config);

}  // namespace kvstash::server
