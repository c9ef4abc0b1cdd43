// Peer access and NVLink from the runtime's peer attributes.
#include "kvstash/cuda/peers.h"

#include <cuda_runtime_api.h>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::cuda {

Result<PeerTopology> PeerTopology::Detect(int devices) {
  std::vector<PeerLink> links(size_t(devices) * size_t(devices));
  const auto at = [&](int from, int to) -> PeerLink& {
    return links[size_t(from) * size_t(devices) + size_t(to)];
  };
  std::vector<int> access(links.size(), 0), atomics(links.size(), 0);
  for (int from = 0; from < devices; ++from) {
    for (int to = 0; to < devices; ++to) {
      if (from == to) continue;
      const size_t i = size_t(from) * size_t(devices) + size_t(to);
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&access[i], from, to));
      if (access[i] == 0) continue;
      KVSTASH_CUDA_RETURN_IF_ERROR(
          cudaDeviceGetP2PAttribute(&atomics[i], cudaDevP2PAttrNativeAtomicSupported, from, to));
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaDeviceGetP2PAttribute(
          &at(from, to).performance_rank, cudaDevP2PAttrPerformanceRank, from, to));
    }
  }
  for (int from = 0; from < devices; ++from) {
    for (int to = 0; to < devices; ++to) {
      if (from == to) continue;
      const size_t i = size_t(from) * size_t(devices) + size_t(to);
      const size_t back = size_t(to) * size_t(devices) + size_t(from);
      PeerLink& link = at(from, to);
      link.access = access[i] != 0 && access[back] != 0;
      link.nvlink = link.access && atomics[i] != 0 && atomics[back] != 0;
    }
  }
  return PeerTopology(devices, std::move(links), "cuda peer attributes (native atomics = NVLink)");
}

Status EnablePeerAccess(int from, int to) {
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(from));
  const cudaError_t enabled = cudaDeviceEnablePeerAccess(to, 0);
  if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return Status::Ok();
  }
  return CudaStatus(enabled, "cudaDeviceEnablePeerAccess");
}

}  // namespace kvstash::cuda
