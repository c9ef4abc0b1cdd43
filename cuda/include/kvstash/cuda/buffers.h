// Owners of CUDA memory: each frees what it holds when destroyed. Movable,
// not copyable; not thread-safe themselves (the bytes are plain memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvstash/status.h"

namespace kvstash::cuda {

// Pinned host memory mapped into every device's address space
// (cudaHostAlloc portable | mapped): the host writes it, kernels read it.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  static Result<PinnedHostBuffer> Allocate(size_t bytes);

  uint8_t* host() const { return host_.get(); }
  uint8_t* device() const { return device_; }  // the same bytes, for kernels
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> host_;
  uint8_t* device_ = nullptr;
  size_t size_ = 0;
};

// Device memory (cudaMalloc) on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> Allocate(size_t bytes);

  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

}  // namespace kvstash::cuda
