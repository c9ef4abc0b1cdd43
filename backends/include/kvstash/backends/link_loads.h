// Bytes each GPU's copy lanes hold, queued or in flight, per direction: the
// per-link queues from which multi-path copies decide whether a GPU's PCIe
// link is idle enough, in that direction, to carry part of another GPU's
// retrieve or store. The
// transfer workers add a job's bytes when it is queued and take them away
// once it has completed; copy lanes read them.
// Thread-safe: relaxed atomics, a snapshot is only ever a hint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kvstash/backends/backend.h"

namespace kvstash::backends {

class LinkLoads {
 public:
  explicit LinkLoads(int devices)
      : devices_(devices), bytes_(std::make_unique<std::atomic<uint64_t>[]>(2 * size_t(devices))) {
    for (size_t i = 0; i < 2 * size_t(devices); ++i) bytes_[i].store(0);
  }

  int devices() const { return devices_; }
  void Add(int device, Direction direction, uint64_t bytes) {
    if (Valid(device)) At(device, direction).fetch_add(bytes, std::memory_order_relaxed);
  }
  void Remove(int device, Direction direction, uint64_t bytes) {
    if (Valid(device)) At(device, direction).fetch_sub(bytes, std::memory_order_relaxed);
  }
  uint64_t Bytes(int device, Direction direction) const {
    return Valid(device) ? At(device, direction).load(std::memory_order_relaxed) : 0;
  }

 private:
  bool Valid(int device) const { return device >= 0 && device < devices_; }
  std::atomic<uint64_t>& At(int device, Direction direction) const {
    return bytes_[2 * size_t(device) + (direction == Direction::kStore ? 0 : 1)];
  }

  const int devices_;
  const std::unique_ptr<std::atomic<uint64_t>[]> bytes_;
};

}  // namespace kvstash::backends
