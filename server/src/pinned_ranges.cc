// Pinned range bookkeeping.
#include "pinned_ranges.h"

namespace kvstash::server {

void PinnedRanges::Add(const uint8_t* begin, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_[uintptr_t(begin)] = uintptr_t(begin) + bytes;
}

void PinnedRanges::Remove(const uint8_t* begin) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_.erase(uintptr_t(begin));
}

bool PinnedRanges::Contains(const uint8_t* begin, const uint8_t* end) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = ranges_.upper_bound(uintptr_t(begin));
  if (after == ranges_.begin()) return false;
  const auto& [range_begin, range_end] = *std::prev(after);
  return uintptr_t(begin) >= range_begin && uintptr_t(end) <= range_end;
}

}  // namespace kvstash::server
