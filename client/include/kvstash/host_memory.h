// HostKvMemory: POSIX shared memory that an engine (or the synthetic engine of
// `kvstash bench`) allocates for its KV layers when kvstashd runs the host
// backend. The daemon maps it by name at RegisterKV.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvstash/client_types.h"
#include "kvstash/status.h"

namespace kvstash {

// Owns one shm object and its mapping: unmaps and shm_unlinks it when
// destroyed (a mapping the daemon holds stays valid until it unmaps). Not
// thread-safe itself; the bytes are plain shared memory.
class HostKvMemory {
 public:
  // Creates a zero-filled region named "/kvstash-<pid>-<counter>". mode is
  // the shm object's permission bits (group access lets a daemon running as
  // another user of the group map it).
  static Result<HostKvMemory> Create(uint64_t size_bytes, mode_t mode = 0660);

  HostKvMemory(HostKvMemory&& other) noexcept;
  HostKvMemory& operator=(HostKvMemory&& other) noexcept;
  HostKvMemory(const HostKvMemory&) = delete;
  HostKvMemory& operator=(const HostKvMemory&) = delete;
  ~HostKvMemory();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_bytes_; }
  const std::string& name() const { return name_; }
  // The allocation description for RegisterOptions::allocations.
  HostShm handle() const { return HostShm{name_, size_bytes_}; }

 private:
  HostKvMemory(std::string name, uint8_t* data, uint64_t size_bytes)
      : name_(std::move(name)), data_(data), size_bytes_(size_bytes) {}
  void Reset();

  std::string name_;
  uint8_t* data_ = nullptr;
  uint64_t size_bytes_ = 0;
};

}  // namespace kvstash
