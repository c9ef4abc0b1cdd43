// Status and Result: what callers may rely on at module boundaries.
#include "kvstash/status.h"

#include <gtest/gtest.h>

#include <string>

namespace kvstash {
namespace {

Result<int> Half(int n) {
  if (n % 2 != 0) return Status::InvalidArgument(std::to_string(n) + " is odd");
  return n / 2;
}

TEST(ResultTest, AValueComesWithAnOkStatus) {
  Result<int> half = Half(8);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(*half, 4);
  // Forwarding status() of a success must not turn it into an error.
  EXPECT_TRUE(half.status().ok()) << half.status().ToString();
}

TEST(ResultTest, AnErrorKeepsItsCodeAndMessage) {
  Result<int> half = Half(7);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(half.status().message(), "7 is odd");
}

}  // namespace
}  // namespace kvstash
