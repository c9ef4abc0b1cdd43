// The client's wire codec for the session's own messages: AttachChannel out,
// and what kvstashd sends in answer or unprompted (AttachChannelReply,
// Goodbye, ChannelClosed).
#include <gtest/gtest.h>

#include <string>

#include "decode.h"
#include "encode.h"

namespace kvstash::client {
namespace {

const wire::Envelope& Verified(const proto::Bytes& bytes) {
  auto envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  EXPECT_TRUE(envelope.ok()) << envelope.status().ToString();
  return **envelope;
}

TEST(ClientCodec, AttachChannelNamesTheSegmentAndItsRings) {
  const proto::Bytes bytes = EncodeAttachChannel(Header{9, 1234, 0}, "/kvstash-ch-1", 4096, 8192);
  const wire::Envelope& envelope = Verified(bytes);
  EXPECT_EQ(envelope.request_id(), 9u);
  EXPECT_EQ(envelope.deadline_ns(), 1234u);
  const wire::AttachChannelRequest* attach = envelope.body_as_AttachChannelRequest();
  ASSERT_NE(attach, nullptr);
  EXPECT_EQ(attach->shm_name()->str(), "/kvstash-ch-1");
  EXPECT_EQ(attach->request_ring_bytes(), 4096u);
  EXPECT_EQ(attach->reply_ring_bytes(), 8192u);
}

TEST(ClientCodec, AttachChannelReplyGivesTheDoorbellOrNone) {
  flatbuffers::FlatBufferBuilder fbb(128);
  proto::Bytes bytes =
      proto::Finish(fbb, 9, wire::Body::AttachChannelReply,
                    wire::CreateAttachChannelReplyDirect(fbb, "/run/k.sock.doorbell").Union());
  Result<std::string> doorbell = DecodeAttachChannel(Verified(bytes));
  ASSERT_TRUE(doorbell.ok()) << doorbell.status().ToString();
  EXPECT_EQ(*doorbell, "/run/k.sock.doorbell");

  fbb.Clear();
  bytes = proto::Finish(fbb, 9, wire::Body::AttachChannelReply,
                        wire::CreateAttachChannelReplyDirect(fbb, nullptr).Union());
  doorbell = DecodeAttachChannel(Verified(bytes));
  ASSERT_TRUE(doorbell.ok());
  EXPECT_EQ(*doorbell, "");
}

TEST(ClientCodec, AttachChannelAnsweredWithAnotherReplyIsMalformed) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const proto::Bytes bytes =
      proto::Finish(fbb, 9, wire::Body::PingReply, wire::CreatePingReply(fbb).Union());
  const Result<std::string> doorbell = DecodeAttachChannel(Verified(bytes));
  EXPECT_FALSE(doorbell.ok());
  EXPECT_NE(doorbell.status().message().find("AttachChannelReply"), std::string::npos)
      << doorbell.status().message();
}

TEST(ClientCodec, GoodbyeAndChannelClosedGiveTheirReasonAndOnlyTheirs) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const proto::Bytes goodbye = proto::Finish(
      fbb, 0, wire::Body::Goodbye, wire::CreateGoodbyeDirect(fbb, "kvstashd is stopping").Union());
  EXPECT_EQ(DecodeGoodbye(Verified(goodbye)), std::optional<std::string>("kvstashd is stopping"));
  EXPECT_EQ(DecodeChannelClosed(Verified(goodbye)), std::nullopt);

  fbb.Clear();
  const proto::Bytes closed =
      proto::Finish(fbb, 0, wire::Body::ChannelClosed,
                    wire::CreateChannelClosedDirect(fbb, "ring broken").Union());
  EXPECT_EQ(DecodeChannelClosed(Verified(closed)), std::optional<std::string>("ring broken"));
  EXPECT_EQ(DecodeGoodbye(Verified(closed)), std::nullopt);
}

TEST(ClientCodec, UnregisterKVReplyAnsweredLocallyReadsAsSuccess) {
  const proto::Bytes bytes = EncodeUnregisterKVReply(11);
  const wire::Envelope& envelope = Verified(bytes);
  EXPECT_EQ(envelope.request_id(), 11u);
  EXPECT_TRUE(DecodeUnregisterKV(envelope).ok());
}

}  // namespace
}  // namespace kvstash::client
