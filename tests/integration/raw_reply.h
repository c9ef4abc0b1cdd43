// The wire protocol spoken by hand: what a raw DEALER got back from kvstashd
// (the error code and message of an ErrorReply, or Ok and the reply's body
// name), and a daemon fixture with such a DEALER. Shared by
// bad_input_test.cc, hostile_input_test.cc and client_names_test.cc.
#pragma once

#include <string>
#include <utility>

#include <zmq.hpp>

#include "harness.h"
#include "kvstash/proto/codec.h"

namespace kvstash::testing {

inline std::pair<wire::ErrorCode, std::string> ReadRawReply(zmq::socket_t& dealer) {
  zmq::message_t reply;
  if (!dealer.recv(reply)) return {wire::ErrorCode::Internal, "no reply within 5 s"};
  auto envelope = proto::VerifyEnvelope(reply.data<uint8_t>(), reply.size(), 1 << 24);
  if (!envelope.ok()) return {wire::ErrorCode::Internal, "reply does not verify"};
  if ((*envelope)->body_type() != wire::Body::ErrorReply) {
    return {wire::ErrorCode::Ok, wire::EnumNameBody((*envelope)->body_type())};
  }
  const auto* error = (*envelope)->body_as_ErrorReply();
  return {error->code(), error->message() ? error->message()->str() : ""};
}

// A DaemonTest with a DEALER connected to the daemon; a reply not there
// within 5 s reads as "no reply".
class RawWireTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, 5000);
    dealer_.connect(daemon_->socket());
  }
  void SendRaw(const proto::Bytes& bytes) {
    dealer_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  // Sends one message; returns the reply's (code, message).
  std::pair<wire::ErrorCode, std::string> Send(const proto::Bytes& bytes) {
    SendRaw(bytes);
    return ReadRawReply(dealer_);
  }

  zmq::context_t context_;
  zmq::socket_t dealer_{context_, zmq::socket_type::dealer};
};

}  // namespace kvstash::testing
