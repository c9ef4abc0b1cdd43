// Picks the backend named by the config: host, cuda, or auto (cuda where the
// daemon was built with CUDA and a GPU is visible, host otherwise).
#pragma once

#include <cstddef>
#include <memory>

#include "kvstash/backends/backend.h"
#include "kvstash/config/server_config.h"

namespace kvstash::backends {

Result<std::unique_ptr<Backend>> CreateBackend(const config::ServerConfig& config);

// The host backend, its copies spread over `copy_threads` threads (the
// caller's among them), as tests and harnesses put it under a service.
std::unique_ptr<Backend> CreateHostBackend(size_t copy_threads);

}  // namespace kvstash::backends
