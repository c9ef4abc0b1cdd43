// Endpoints as users write them, and the one a client picks.
#include "kvstash/endpoint.h"

#include <gtest/gtest.h>

namespace kvstash {
namespace {

TEST(Endpoint, PlainPathBecomesIpcSocket) {
  EXPECT_EQ(NormalizeEndpoint("/run/k.sock"), "ipc:///run/k.sock");
  EXPECT_EQ(NormalizeEndpoint("k.sock"), "ipc://k.sock");
  EXPECT_EQ(NormalizeEndpoint("tcp://127.0.0.1:5555"), "tcp://127.0.0.1:5555");
  EXPECT_EQ(NormalizeEndpoint(""), "");
}

TEST(Endpoint, GivenSocketWinsOverTheEnvironmentValue) {
  EXPECT_EQ(ClientEndpoint("/a.sock", "/b.sock"), "ipc:///a.sock");
}

TEST(Endpoint, EnvironmentValueUsedWhenNoSocketGiven) {
  EXPECT_EQ(ClientEndpoint("", "/b.sock"), "ipc:///b.sock");
}

TEST(Endpoint, DefaultSocketWhenNeitherIsSet) { EXPECT_EQ(ClientEndpoint("", ""), kDefaultSocket); }

}  // namespace
}  // namespace kvstash
