// Peer credentials as libzmq reports them on an ipc socket.
#include "peer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <zmq.hpp>

namespace kvstash::server {
namespace {

// The installed libzmq (4.3.4 here) exposes SO_PEERCRED of an ipc connection
// as "Peer-Address" on every message: check the format we parse is real.
TEST(PeerTest, LibzmqReportsAnIpcPeersUidGidAndPid) {
  char dir[] = "/tmp/kvstash-peer-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string endpoint = std::string("ipc://") + dir + "/s";
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  router.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::linger, 0);
  router.bind(endpoint);
  dealer.connect(endpoint);
  dealer.send(zmq::str_buffer("hello"));
  zmq::message_t identity, body;
  ASSERT_TRUE(router.recv(identity));
  ASSERT_TRUE(router.recv(body));
  const char* address = zmq_msg_gets(body.handle(), "Peer-Address");
  ASSERT_NE(address, nullptr);
  const std::optional<PeerCredentials> peer = ParsePeerAddress(address);
  ASSERT_TRUE(peer.has_value()) << address;
  EXPECT_EQ(peer->uid, getuid()) << address;
  EXPECT_EQ(peer->gid, getgid()) << address;
  EXPECT_EQ(peer->pid, getpid()) << address;
  router.close();
  dealer.close();
  unlink((std::string(dir) + "/s").c_str());
  rmdir(dir);
}

TEST(PeerTest, AddressesWithoutCredentialsParseToNothing) {
  EXPECT_FALSE(ParsePeerAddress("127.0.0.1").has_value());
  EXPECT_FALSE(ParsePeerAddress("").has_value());
  EXPECT_FALSE(ParsePeerAddress("a:b:c").has_value());
  EXPECT_TRUE(ParsePeerAddress(":1001:1001:42").has_value());
  EXPECT_FALSE(ParsePeerAddress("1001:1001:").has_value());
  EXPECT_FALSE(ParsePeerAddress("::").has_value());
  EXPECT_FALSE(ParsePeerAddress(":").has_value());
  EXPECT_FALSE(ParsePeerAddress("1001:1001").has_value());
}

TEST(PeerTest, CredentialsAreTheLastThreeFields) {
  const std::optional<PeerCredentials> peer = ParsePeerAddress("localhost:1001:1002:42");
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->uid, 1001u);
  EXPECT_EQ(peer->gid, 1002u);
  EXPECT_EQ(peer->pid, 42);
  const std::optional<PeerCredentials> bare = ParsePeerAddress("7:8:9");
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->uid, 7u);
  EXPECT_EQ(bare->pid, 9);
}

}  // namespace
}  // namespace kvstash::server
