// AddCudaLayers in a libkvstash built without CUDA.
#include "kvstash/cuda_memory.h"

namespace kvstash {

Status AddCudaLayers(const std::vector<CudaLayer>& /*layers*/, RegisterOptions& /*options*/) {
  return Status::Unavailable(
      "libkvstash was built without CUDA, so it cannot share GPU memory; rebuild it with nvcc on "
      "the PATH (KVSTASH_WITH_CUDA=ON)");
}

}  // namespace kvstash
