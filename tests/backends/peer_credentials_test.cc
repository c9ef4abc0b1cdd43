// What a peer may open on its own, which bounds what a backend opens for it.
#include "kvstash/backends/peer_credentials.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kvstash::backends {
namespace {

TEST(PeerCredentialsTest, MayReadWriteFollowsTheOwnerGroupOtherClasses) {
  const PeerCredentials tenant{1001, 1001, getpid()};
  EXPECT_TRUE(MayReadWrite(tenant, 1001, 5, 0600, "/x").ok());
  EXPECT_FALSE(MayReadWrite(tenant, 0, 0, 0600, "/x").ok());
  EXPECT_EQ(MayReadWrite(tenant, 0, 0, 0600, "/x").message(), "peer uid 1001 may not open /x");
  EXPECT_TRUE(MayReadWrite(tenant, 0, 1001, 0660, "/x").ok());
  EXPECT_FALSE(MayReadWrite(tenant, 0, 1001, 0640, "/x").ok());
  EXPECT_TRUE(MayReadWrite(tenant, 0, 0, 0666, "/x").ok());
  // The owner class decides for the owner, even when others may.
  EXPECT_FALSE(MayReadWrite(tenant, 1001, 0, 0066, "/x").ok());
  EXPECT_TRUE(MayReadWrite(PeerCredentials{0, 0, 1}, 5, 5, 0600, "/x").ok());
  EXPECT_FALSE(MayReadWrite(std::nullopt, 0, 0, 0666, "/x").ok());
}

}  // namespace
}  // namespace kvstash::backends
