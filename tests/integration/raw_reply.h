// What a raw DEALER got back from kvstashd: the error code and message of an
// ErrorReply, or Ok and the reply's body name. Shared by the tests that speak
// the wire protocol by hand (bad_input_test.cc, hostile_input_test.cc).
#pragma once

#include <string>
#include <utility>

#include <zmq.hpp>

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

}  // namespace kvstash::testing
