// How the node's GPUs reach each other: peer access and NVLink, read once at
// start from the CUDA runtime's peer attributes. The toolkit ships no NVML
// header, so NVLink is inferred from the attributes: a peer link with native
// atomics is NVLink (PCIe peer links carry no native atomics between GPUs).
#pragma once

#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::cuda {

struct PeerLink {
  bool access = false;       // cudaDeviceCanAccessPeer, both ways
  bool nvlink = false;       // access, and native atomics both ways
  int performance_rank = 0;  // cudaDevP2PAttrPerformanceRank (lower is faster)
};

class PeerTopology {
 public:
  // Reads every ordered pair of the `devices` visible devices.
  static Result<PeerTopology> Detect(int devices);
  // A topology given by hand (tests): links[from * devices + to].
  PeerTopology(int devices, std::vector<PeerLink> links, std::string source)
      : devices_(devices), links_(std::move(links)), source_(std::move(source)) {}

  int devices() const { return devices_; }
  const PeerLink& link(int from, int to) const { return links_[size_t(from * devices_ + to)]; }
  // Whether `relay` can carry retrieves for `target`: peer access and
  // NVLink between them.
  bool CanRelay(int relay, int target) const {
    return relay != target && link(relay, target).nvlink;
  }
  const std::string& source() const { return source_; }  // how NVLink was decided

 private:
  int devices_ = 0;
  std::vector<PeerLink> links_;
  std::string source_;
};

// Enables peer access from `from` to `to`'s memory (the current device is
// changed); access already enabled is fine.
Status EnablePeerAccess(int from, int to);

}  // namespace kvstash::cuda
