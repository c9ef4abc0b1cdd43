// The C ABI's size rule (kvstash.h, "The ABI"): the structs that may grow
// lead with struct_size, and the library reads and writes only that prefix.
// Here each such struct's first version is recorded, and the copies in and
// out that keep an engine built against an older kvstash.h working.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "kvstash/kvstash.h"
#include "kvstash/status.h"

namespace kvstash::capi {

// Each struct's name and the end of its last field in its first version
// (libkvstash.so.1): no kvstash.h declares it shorter. Frozen: adding a
// field to a struct never changes these.
template <typename T>
struct FirstVersion;
template <>
struct FirstVersion<kvstash_options> {
  static constexpr const char* kName = "kvstash_options";
  static constexpr size_t kBytes = offsetof(kvstash_options, busy_poll_us) + sizeof(uint32_t);
};
template <>
struct FirstVersion<kvstash_register_options> {
  static constexpr const char* kName = "kvstash_register_options";
  static constexpr size_t kBytes =
      offsetof(kvstash_register_options, replicated_across_ranks) + sizeof(uint32_t);
};
template <>
struct FirstVersion<kvstash_registration> {
  static constexpr const char* kName = "kvstash_registration";
  static constexpr size_t kBytes = offsetof(kvstash_registration, namespace_id) + 32;
};
template <>
struct FirstVersion<kvstash_lookup_result> {
  static constexpr const char* kName = "kvstash_lookup_result";
  static constexpr size_t kBytes = offsetof(kvstash_lookup_result, prefetch_pending) + 4;
};
template <>
struct FirstVersion<kvstash_server_info> {
  static constexpr const char* kName = "kvstash_server_info";
  static constexpr size_t kBytes = offsetof(kvstash_server_info, restarts) + sizeof(uint32_t);
};

// No struct of ours will be this large; a struct_size past it is a pointer:
// the first field of every struct in libkvstash.so.0's kvstash.h.
inline constexpr size_t kMaxStructBytes = 4096;

// Whether `struct_size` can be a size of T from some kvstash.h.
template <typename T>
Status CheckStructSize(size_t struct_size) {
  using V = FirstVersion<T>;
  if (struct_size >= V::kBytes && struct_size <= kMaxStructBytes) return Status::Ok();
  return Status::InvalidArgument(
      std::string(V::kName) + ".struct_size is " + std::to_string(struct_size) + ", expected " +
      std::to_string(V::kBytes) + " to " + std::to_string(kMaxStructBytes) + " (sizeof is " +
      std::to_string(sizeof(T)) + " in this libkvstash's kvstash.h): start from the " +
      "KVSTASH_*_INIT initialiser; an engine built against an older kvstash.h without " +
      "struct_size (libkvstash.so.0) must be rebuilt against this one");
}

// The caller's input struct, in full: the bytes it gave and zero for the
// fields its kvstash.h did not have yet. Refuses fields this library does
// not know that the caller set.
template <typename T>
Result<T> ReadVersioned(const T& in) {
  const size_t size = in.struct_size;
  KVSTASH_RETURN_IF_ERROR(CheckStructSize<T>(size));
  const auto* bytes = reinterpret_cast<const unsigned char*>(&in);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      return Status::InvalidArgument(std::string(FirstVersion<T>::kName) + " sets byte " +
                                     std::to_string(i) + " of " + std::to_string(size) +
                                     ", a field this libkvstash does not know (it knows " +
                                     std::to_string(sizeof(T)) + " bytes): use a newer libkvstash");
    }
  }
  T out{};
  std::memcpy(&out, &in, std::min(size, sizeof(T)));
  return out;
}

// Writes `full` into the caller's output struct: its first struct_size bytes
// only (CheckStructSize passed), struct_size itself left as the caller set it.
template <typename T>
void WriteVersioned(const T& full, T* out) {
  constexpr size_t kHead = sizeof(size_t);
  const size_t size = std::min(out->struct_size, sizeof(T));
  std::memcpy(reinterpret_cast<unsigned char*>(out) + kHead,
              reinterpret_cast<const unsigned char*>(&full) + kHead, size - kHead);
}

}  // namespace kvstash::capi
