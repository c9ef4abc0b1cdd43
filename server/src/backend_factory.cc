// Backend selection.
#include "backend_factory.h"

#include <algorithm>
#include <thread>

#include "host_backend.h"

namespace kvstash::server {

Result<std::unique_ptr<Backend>> CreateBackend(const config::ServerConfig& config) {
  const size_t copy_threads =
      config.copy_threads ? config.copy_threads
                          : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  if (config.backend == "host" || config.backend == "auto") {
    return std::unique_ptr<Backend>(std::make_unique<HostBackend>(copy_threads));
  }
  if (config.backend == "cuda") {
    return Status::Unavailable(
        "the cuda backend is not available in this build of kvstashd; use --backend host");
  }
  return Status::InvalidArgument("unknown backend \"" + config.backend + "\"");
}

}  // namespace kvstash::server
