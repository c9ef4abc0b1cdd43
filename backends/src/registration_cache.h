// What a copy lane derives from a registration once and keeps (its layer
// addresses on the GPU), found by registration id. Registration ids are
// random and never reused, so a registration dropped and another made at the
// same addresses never meet the first one's entry; entries of registrations
// gone age out: the least recently used goes once `capacity` are held.
//
// Not thread-safe: owned by one lane and used by its thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

namespace kvstash::backends {

template <typename Entry>
class RegistrationCache {
 public:
  explicit RegistrationCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The entry of `id`, now the most recently used; null when absent.
  Entry* Find(uint64_t id) {
    auto found = index_.find(id);
    if (found == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, found->second);
    return &found->second->second;
  }
  // Adds (or replaces) the entry of `id`, dropping the least recently used
  // entries beyond capacity. The caller makes sure no copy still reads them.
  Entry& Insert(uint64_t id, Entry entry) {
    if (auto found = index_.find(id); found != index_.end()) {
      order_.erase(found->second);
      index_.erase(found);
    }
    order_.emplace_front(id, std::move(entry));
    index_[id] = order_.begin();
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }
  size_t size() const { return order_.size(); }
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [id, entry] : order_) f(entry);
  }

 private:
  using List = std::list<std::pair<uint64_t, Entry>>;
  size_t capacity_;
  List order_;  // most recently used first
  std::unordered_map<uint64_t, typename List::iterator> index_;
};

}  // namespace kvstash::backends
