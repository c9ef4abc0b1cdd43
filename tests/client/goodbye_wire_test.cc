// kvstashd's side of a SIGTERM, on the wire: a raw DEALER that spoke to the
// daemon receives a Goodbye (request id 0) before the daemon exits.
#include <gtest/gtest.h>
#include <signal.h>

#include <zmq.hpp>

#include "daemon_process.h"
#include "kvstash/proto/codec.h"

namespace kvstash::testing {
namespace {

TEST(GoodbyeOnTheWire, SigtermSendsAGoodbyeToEveryPeerHeardFrom) {
  auto daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect((*daemon)->socket());
  flatbuffers::FlatBufferBuilder fbb(64);
  const proto::Bytes ping =
      proto::Finish(fbb, 7, wire::Body::PingRequest, wire::CreatePingRequest(fbb).Union());
  dealer.send(zmq::buffer(ping), zmq::send_flags::none);
  zmq::message_t reply;
  ASSERT_TRUE(dealer.recv(reply));  // the daemon has heard from this peer

  (*daemon)->Signal(SIGTERM);
  zmq::message_t message;
  ASSERT_TRUE(dealer.recv(message)) << "no Goodbye within 5 s";
  auto envelope = proto::VerifyEnvelope(message.data(), message.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok()) << envelope.status().ToString();
  EXPECT_EQ((*envelope)->request_id(), 0u);
  ASSERT_EQ((*envelope)->body_type(), wire::Body::Goodbye);
  const auto* reason = (*envelope)->body_as_Goodbye()->reason();
  ASSERT_NE(reason, nullptr);
  EXPECT_NE(reason->str().find("stopping"), std::string::npos) << reason->str();
  EXPECT_EQ((*daemon)->Wait(), 0);
}

}  // namespace
}  // namespace kvstash::testing
