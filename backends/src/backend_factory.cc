// Backend selection.
#include "kvstash/backends/backend_factory.h"

#include <algorithm>
#include <thread>

#include "backends_logger.h"
#include "host_backend.h"
#if KVSTASH_HAVE_CUDA
#include "cuda_backend.h"
#endif

namespace kvstash::backends {

namespace {

std::unique_ptr<Backend> MakeHostBackend(const config::ServerConfig& config) {
  const size_t copy_threads = config.copy_threads
                                  ? config.copy_threads
                                  : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  return CreateHostBackend(copy_threads);
}

}  // namespace

std::unique_ptr<Backend> CreateHostBackend(size_t copy_threads) {
  return std::make_unique<HostBackend>(copy_threads);
}

Result<std::unique_ptr<Backend>> CreateBackend(const config::ServerConfig& config) {
  using config::BackendKind;
  if (config.backend == BackendKind::kHost) return MakeHostBackend(config);
#if KVSTASH_HAVE_CUDA
  Result<std::unique_ptr<Backend>> cuda = CudaBackend::Create(config);
  if (cuda.ok()) return cuda;
  // auto: a machine without a usable GPU (or driver) runs the host backend;
  // any other failure of a GPU that is there is reported.
  if (config.backend == BackendKind::kAuto && cuda.status().code() == StatusCode::kUnavailable) {
    Logger()->info("backend auto: {}; using the host backend", cuda.status().message());
    return MakeHostBackend(config);
  }
  return Status(cuda.status().code(), "--backend " + std::string(NameOf(config.backend)) + ": " +
                                          cuda.status().message() +
                                          (cuda.status().code() == StatusCode::kUnavailable
                                               ? "; on a machine without a GPU use --backend host"
                                               : ""));
#else
  if (config.backend == BackendKind::kAuto) return MakeHostBackend(config);
  return Status::Unavailable(
      "--backend cuda: this kvstashd was built without CUDA; use --backend host, or build with "
      "nvcc on the PATH (KVSTASH_WITH_CUDA=ON)");
#endif
}

}  // namespace kvstash::backends
