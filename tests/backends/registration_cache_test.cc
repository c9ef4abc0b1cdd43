// A copy lane's per-registration cache: found by id, least recently used
// dropped beyond capacity, and a new registration (a new id) never meets a
// dropped one's entry, whatever addresses it has.
#include "registration_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace kvstash::backends {
namespace {

TEST(RegistrationCache, ASecondRequestOfARegistrationFindsItsFirstRequestsEntry) {
  RegistrationCache<std::string> cache(4);
  EXPECT_EQ(cache.Find(7), nullptr);
  cache.Insert(7, "plan of 7");
  ASSERT_NE(cache.Find(7), nullptr);
  EXPECT_EQ(*cache.Find(7), "plan of 7");
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RegistrationCache, ANewRegistrationGetsAFreshEntryNotADroppedOnes) {
  RegistrationCache<std::string> cache(4);
  cache.Insert(7, "addresses of registration 7");
  // Registration 7 dropped; 9 registered at the very same addresses.
  EXPECT_EQ(cache.Find(9), nullptr) << "a new id must not find another registration's plan";
  cache.Insert(9, "addresses of registration 9");
  EXPECT_EQ(*cache.Find(9), "addresses of registration 9");
}

TEST(RegistrationCache, TheLeastRecentlyUsedGoesBeyondCapacity) {
  RegistrationCache<int> cache(2);
  cache.Insert(1, 10);
  cache.Insert(2, 20);
  ASSERT_NE(cache.Find(1), nullptr);  // 1 is now the most recently used
  cache.Insert(3, 30);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_EQ(*cache.Find(1), 10);
  EXPECT_EQ(*cache.Find(3), 30);
}

TEST(RegistrationCache, InsertingAnIdAgainReplacesItsEntry) {
  RegistrationCache<int> cache(2);
  cache.Insert(1, 10);
  cache.Insert(1, 11);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(*cache.Find(1), 11);
}

}  // namespace
}  // namespace kvstash::backends
