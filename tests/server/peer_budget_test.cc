// PeerBudget: charges by process and user, refused whole at any bound,
// given back by whoever holds the charge last.
#include "peer_budget.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

Peer Process(uid_t uid, pid_t pid, const std::string& connection) {
  return Peer{connection, PeerCredentials{uid, uid, pid}};
}

PeerBudget::Amounts Registrations(uint64_t count, uint64_t mappings) {
  PeerBudget::Amounts amounts{};
  amounts[PeerBudget::kRegistrations] = count;
  amounts[PeerBudget::kMappings] = mappings;
  return amounts;
}

PeerBudget::Limits SmallLimits() {
  PeerBudget::Limits limits;
  limits.per_process[PeerBudget::kRegistrations] = 2;
  limits.per_user[PeerBudget::kMappings] = 5;
  limits.total[PeerBudget::kMappings] = 8;
  return limits;
}

TEST(PeerBudget, BoundsAProcessOverAllItsConnections) {
  PeerBudget budget(SmallLimits());
  std::vector<PeerBudget::Hold> held;
  for (int i = 0; i < 2; ++i) {
    auto hold =
        budget.Charge(Process(1000, 42, "connection-" + std::to_string(i)), Registrations(1, 1));
    ASSERT_TRUE(hold.ok()) << hold.status().ToString();
    held.push_back(std::move(*hold));
  }
  auto refused = budget.Charge(Process(1000, 42, "connection-9"), Registrations(1, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "process 42 of uid 1000 holds 2 registrations and asks for 1 more; the limit is 2 "
            "(--max-registrations-per-process)");
  // Another process of the user is charged on its own, up to the user's bound.
  EXPECT_TRUE(budget.Charge(Process(1000, 43, "c"), Registrations(1, 3)).ok());
  held.clear();  // given back
  EXPECT_EQ(budget.HeldByProcess(Process(1000, 42, "x")), PeerBudget::Amounts{});
  EXPECT_EQ(budget.HeldInTotal(), PeerBudget::Amounts{});
}

TEST(PeerBudget, BoundsAUserOverAllItsProcessesAndEveryoneInTotal) {
  PeerBudget budget(SmallLimits());
  auto first = budget.Charge(Process(1000, 1, "a"), Registrations(1, 4));
  ASSERT_TRUE(first.ok());
  auto user_full = budget.Charge(Process(1000, 2, "b"), Registrations(1, 2));
  ASSERT_FALSE(user_full.ok());
  EXPECT_NE(user_full.status().message().find("uid 1000 holds 4 memory mappings"),
            std::string::npos)
      << user_full.status().ToString();
  // A refused charge charges nothing.
  EXPECT_EQ(budget.HeldByUser(Process(1000, 2, "b"))[PeerBudget::kMappings], 4u);
  auto other_user = budget.Charge(Process(2000, 3, "c"), Registrations(1, 4));
  ASSERT_TRUE(other_user.ok());
  auto total_full = budget.Charge(Process(3000, 4, "d"), Registrations(1, 1));
  ASSERT_FALSE(total_full.ok());
  EXPECT_NE(total_full.status().message().find("all peers together"), std::string::npos);
  *first = PeerBudget::Hold();  // gives its 4 back
  EXPECT_TRUE(budget.Charge(Process(3000, 4, "d"), Registrations(1, 1)).ok());
}

TEST(PeerBudget, TcpPeersAreTheirConnectionAndOneUser) {
  PeerBudget budget(SmallLimits());
  const Peer a{"tcp-a", std::nullopt};
  const Peer b{"tcp-b", std::nullopt};
  auto ha = budget.Charge(a, Registrations(2, 2));
  ASSERT_TRUE(ha.ok()) << ha.status().ToString();
  auto hb = budget.Charge(b, Registrations(1, 3));
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  auto refused = budget.Charge(b, Registrations(1, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the tcp peers"), std::string::npos);
}

TEST(PeerBudget, TotalMappingsAreHalfTheKernelsMapCount) {
  config::ServerConfig config;
  EXPECT_EQ(PeerBudget::LimitsFrom(config, 65530).total[PeerBudget::kMappings], 32765u);
  EXPECT_EQ(PeerBudget::LimitsFrom(config, 0).total[PeerBudget::kMappings], 32765u);
  EXPECT_EQ(PeerBudget::LimitsFrom(config, 262144).total[PeerBudget::kMappings], 131072u);
  EXPECT_EQ(PeerBudget::LimitsFrom(config, 0).per_process[PeerBudget::kRegistrations],
            config.max_registrations_per_process);
}

}  // namespace
}  // namespace kvstash::server
