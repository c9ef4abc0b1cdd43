// Byte-buffer assertions for the kernel tests: whole buffers are compared, so
// a failure names the first differing offset instead of printing megabytes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kvstash::kernels::test {

inline std::string Hex(uint8_t byte) {
  char text[8];
  std::snprintf(text, sizeof(text), "0x%02x", byte);
  return text;
}

inline ::testing::AssertionResult SameBytes(const std::vector<uint8_t>& actual,
                                            const std::vector<uint8_t>& expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected " << expected.size();
  }
  const auto mismatch = std::mismatch(actual.begin(), actual.end(), expected.begin());
  if (mismatch.first == actual.end()) return ::testing::AssertionSuccess();
  size_t differing = 0;
  for (size_t i = 0; i < actual.size(); ++i) differing += actual[i] != expected[i];
  return ::testing::AssertionFailure()
         << differing << " of " << actual.size() << " bytes differ, first at offset "
         << (mismatch.first - actual.begin()) << ": " << Hex(*mismatch.first) << " != expected "
         << Hex(*mismatch.second);
}

inline uint64_t CountNot(const std::vector<uint8_t>& bytes, uint8_t value, uint64_t begin = 0,
                         uint64_t end = UINT64_MAX) {
  end = std::min<uint64_t>(end, bytes.size());
  return static_cast<uint64_t>(std::count_if(bytes.begin() + begin, bytes.begin() + end,
                                             [value](uint8_t b) { return b != value; }));
}

}  // namespace kvstash::kernels::test
