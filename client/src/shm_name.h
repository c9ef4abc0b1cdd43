// Fresh names for the POSIX shared-memory objects libkvstash creates
// (channels, copy fences): the process, a per-process counter and a random
// word, so that two clients never ask for the same name.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace kvstash::client {

// "/kvstash-<kind>-<pid>-<n>-<random>".
inline std::string FreshShmName(const char* kind) {
  static std::atomic<uint32_t> counter{0};  // names only; no state shared otherwise
  std::random_device random;
  char name[96];
  std::snprintf(name, sizeof(name), "/kvstash-%s-%d-%u-%08x", kind, int(getpid()),
                counter.fetch_add(1), unsigned(random()));
  return name;
}

}  // namespace kvstash::client
