// The L1 slabs pinned for the GPU (each by its own cudaHostRegister). A
// cudaMemcpy that spans two of them fails, so copies that merge adjacent
// slots ask here first.
//
// Thread-safe: slab preparers add ranges while lane threads look them up.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace kvstash::server {

class PinnedRanges {
 public:
  void Add(const uint8_t* begin, uint64_t bytes);
  void Remove(const uint8_t* begin);
  // True when [begin, end) lies inside one pinned range.
  bool Contains(const uint8_t* begin, const uint8_t* end) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, uintptr_t> ranges_;  // begin -> end; GUARDED_BY(mutex_)
};

}  // namespace kvstash::server
