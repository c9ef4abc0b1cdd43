// The server's edge: half-valid tables that pass the FlatBuffers Verifier
// (a union type with no table, a missing vector) become InvalidArgument at
// decode, so no handler ever sees them.
#include "wire_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace kvstash::server {
namespace {

// Finishes `body` in an envelope and decodes it as the daemon does.
Result<RequestBody> Decode(flatbuffers::FlatBufferBuilder& fbb, wire::Body type,
                           flatbuffers::Offset<void> body) {
  static proto::Bytes bytes;
  bytes = proto::Finish(fbb, 7, type, body);
  Result<const wire::Envelope*> envelope =
      proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  if (!envelope.ok()) return envelope.status();
  return DecodeRequest(**envelope, DecodeLimits{8});
}

TEST(WireCodecTest, AnAllocationNamingAHandleTypeWithoutItsTableIsInvalid) {
  for (wire::MemoryHandle type :
       {wire::MemoryHandle::HostShmHandle, wire::MemoryHandle::CudaIpcHandle,
        wire::MemoryHandle::PeerFdHandle}) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations = {
        wire::CreateAllocation(fbb, type, 0)};
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers = {
        wire::CreateLayerDesc(fbb, 0, 0, proto::ToWire(fbb, LayerGeometry{}))};
    auto body = wire::CreateRegisterKVRequestDirect(fbb, "m", nullptr, 0, 1, &allocations, &layers);
    Result<RequestBody> decoded = Decode(fbb, wire::Body::RegisterKVRequest, body.Union());
    ASSERT_FALSE(decoded.ok());
    // The Verifier may refuse it first (MalformedMessage); either way no
    // handler sees it.
    EXPECT_TRUE(decoded.status().code() == StatusCode::kInvalidArgument ||
                decoded.status().code() == StatusCode::kMalformedMessage)
        << decoded.status().ToString();
  }
}

Result<RequestBody> DecodePeerFd(int fd, uint64_t bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  auto handle = wire::CreatePeerFdHandle(fbb, fd, bytes);
  std::vector<flatbuffers::Offset<wire::Allocation>> allocations = {
      wire::CreateAllocation(fbb, wire::MemoryHandle::PeerFdHandle, handle.Union())};
  std::vector<flatbuffers::Offset<wire::LayerDesc>> layers = {
      wire::CreateLayerDesc(fbb, 0, 0, proto::ToWire(fbb, LayerGeometry{}))};
  auto body = wire::CreateRegisterKVRequestDirect(fbb, "m", nullptr, 0, 1, &allocations, &layers);
  return Decode(fbb, wire::Body::RegisterKVRequest, body.Union());
}

TEST(WireCodecTest, APeerDescriptorDecodesToItsNumberAndSize) {
  Result<RequestBody> decoded = DecodePeerFd(7, 4096);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto* m = std::get_if<RegisterRequest>(&*decoded);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->registration.allocations.size(), 1u);
  const AllocationSpec& spec = m->registration.allocations[0];
  EXPECT_EQ(spec.kind, AllocationSpec::Kind::kPeerFd);
  EXPECT_EQ(spec.peer_fd, 7);
  EXPECT_EQ(spec.size_bytes, 4096u);
}

TEST(WireCodecTest, ANegativePeerDescriptorIsInvalidNamingIt) {
  Result<RequestBody> decoded = DecodePeerFd(-3, 4096);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("-3"), std::string::npos);
}

TEST(WireCodecTest, AnEnvelopeNamingABodyTypeWithoutTheBodyIsInvalid) {
  flatbuffers::FlatBufferBuilder fbb;
  Result<RequestBody> decoded = Decode(fbb, wire::Body::StoreRequest, flatbuffers::Offset<void>(0));
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().code(), StatusCode::kOk);
}

TEST(WireCodecTest, MissingVectorsAndChunkKeysAreInvalid) {
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::CreateStoreRequest(fbb, 1, 0);
    Result<RequestBody> decoded = Decode(fbb, wire::Body::StoreRequest, body.Union());
    ASSERT_FALSE(decoded.ok());
    // The schema walker (proto/src/message_rules.cc) refuses it before the codec.
    EXPECT_EQ(decoded.status().message(), "StoreRequest.chunks: is missing");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks = {
        wire::CreateChunkBlocks(fbb, nullptr, 16, 0)};
    auto body = wire::CreateRetrieveRequestDirect(fbb, 1, &chunks);
    Result<RequestBody> decoded = Decode(fbb, wire::Body::RetrieveRequest, body.Union());
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().message(), "RetrieveRequest.chunks[0].block_ids: is missing");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::CreateLookupRequest(fbb, 1, 0, 0);
    Result<RequestBody> decoded = Decode(fbb, wire::Body::LookupRequest, body.Union());
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(WireCodecTest, CountsAndNamesAreCheckedAgainstTheirLimits) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks;
  const wire::Key key;
  const std::vector<uint32_t> blocks = {0};
  for (int i = 0; i < 9; ++i)
    chunks.push_back(wire::CreateChunkBlocksDirect(fbb, &key, 16, &blocks));
  auto body = wire::CreateStoreRequestDirect(fbb, 1, &chunks);
  Result<RequestBody> decoded = Decode(fbb, wire::Body::StoreRequest, body.Union());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kTooLarge);
  EXPECT_EQ(decoded.status().message(), "the request names 9 chunks; the limit is 8");

  flatbuffers::FlatBufferBuilder clear;
  auto clear_body = wire::CreateClearRequestDirect(clear, std::string(257, 'm').c_str(), nullptr);
  decoded = Decode(clear, wire::Body::ClearRequest, clear_body.Union());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "ClearRequest.model: 257 bytes exceed the limit of 256");
}

TEST(WireCodecTest, AValidStoreDecodesToPlainChunks) {
  flatbuffers::FlatBufferBuilder fbb;
  const wire::Key key;
  const std::vector<uint32_t> blocks = {3, 4};
  std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks = {
      wire::CreateChunkBlocksDirect(fbb, &key, 20, &blocks)};
  auto body = wire::CreateStoreRequestDirect(fbb, 42, &chunks);
  Result<RequestBody> decoded = Decode(fbb, wire::Body::StoreRequest, body.Union());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(KindOf(*decoded), RequestKind::kStore);
  const StoreRequest& store = std::get<StoreRequest>(*decoded);
  EXPECT_EQ(store.registration_id, 42u);
  ASSERT_EQ(store.chunks.size(), 1u);
  EXPECT_EQ(store.chunks[0].num_tokens, 20u);
  EXPECT_EQ(
      std::vector<uint32_t>(store.chunks[0].block_ids.begin(), store.chunks[0].block_ids.end()),
      blocks);
}

// Block ids are read in place from the message; from a message whose bytes
// sit misaligned they are copied into the request, as they are before a
// request outlives its message (OwnBlockIds).
TEST(WireCodecTest, BlockIdsAreReadInPlaceOrOwnedWhenTheMessageCannotServe) {
  flatbuffers::FlatBufferBuilder fbb;
  const wire::Key key;
  const std::vector<uint32_t> first = {3, 4, 5}, second = {9};
  std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks = {
      wire::CreateChunkBlocksDirect(fbb, &key, 40, &first),
      wire::CreateChunkBlocksDirect(fbb, &key, 10, &second)};
  auto body = wire::CreateRetrieveRequestDirect(fbb, 42, &chunks);
  const proto::Bytes bytes = proto::Finish(fbb, 7, wire::Body::RetrieveRequest, body.Union());
  const auto ids = [](const ChunkRequest& chunk) {
    return std::vector<uint32_t>(chunk.block_ids.begin(), chunk.block_ids.end());
  };
  for (size_t shift : {size_t(0), size_t(1), size_t(2)}) {
    // 8-byte aligned (the Verifier's alignment is relative to the start), then shifted.
    std::vector<uint8_t> buffer(bytes.size() + 16);
    uint8_t* at = buffer.data() + (8 - reinterpret_cast<uintptr_t>(buffer.data()) % 8) % 8 + shift;
    std::copy(bytes.begin(), bytes.end(), at);
    Result<const wire::Envelope*> envelope = proto::VerifyEnvelope(at, bytes.size(), 1 << 20);
    ASSERT_TRUE(envelope.ok()) << envelope.status().ToString();
    Result<RequestBody> decoded = DecodeRequest(**envelope, DecodeLimits{8});
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    RetrieveRequest request = std::move(std::get<RetrieveRequest>(*decoded));
    ASSERT_EQ(request.chunks.size(), 2u);
    const auto* ids_at = reinterpret_cast<const uint8_t*>(request.chunks[0].block_ids.data());
    const bool in_message = ids_at >= at && ids_at < at + bytes.size();
    EXPECT_EQ(in_message, shift == 0) << "shift " << shift;
    EXPECT_EQ(request.owned_block_ids.empty(), shift == 0) << "shift " << shift;
    EXPECT_EQ(ids(request.chunks[0]), first);
    EXPECT_EQ(ids(request.chunks[1]), second);
    request.OwnBlockIds();
    std::fill(buffer.begin(), buffer.end(), 0xee);  // the message is gone
    EXPECT_EQ(ids(request.chunks[0]), first);
    EXPECT_EQ(ids(request.chunks[1]), second);
    EXPECT_EQ(request.owned_block_ids, (std::vector<uint32_t>{3, 4, 5, 9}));
  }
}

TEST(WireCodecTest, AttachChannelDecodesToThePlainRequestForTheFrontend) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const proto::Bytes bytes =
      proto::Finish(fbb, 5, wire::Body::AttachChannelRequest,
                    wire::CreateAttachChannelRequestDirect(fbb, "/kvstash-ch", 4096, 8192).Union());
  auto envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok()) << envelope.status().ToString();
  const AttachChannelRequest attach = DecodeAttachChannel(**envelope);
  EXPECT_EQ(attach.shm_name, "/kvstash-ch");
  EXPECT_EQ(attach.request_ring_bytes, 4096u);
  EXPECT_EQ(attach.reply_ring_bytes, 8192u);
}

TEST(WireCodecTest, FrontendMessagesEncodeTheirBodyAndRequestId) {
  proto::Bytes bytes = EncodeAttachChannelReply(5, "/run/k.sock.doorbell");
  auto envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok());
  EXPECT_EQ((*envelope)->request_id(), 5u);
  EXPECT_EQ((*envelope)->body_as_AttachChannelReply()->doorbell()->str(), "/run/k.sock.doorbell");

  bytes = EncodeAttachChannelReply(6, "");
  envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok());
  EXPECT_EQ((*envelope)->body_as_AttachChannelReply()->doorbell(), nullptr);  // no doorbell

  bytes = EncodeGoodbye("kvstashd is stopping");
  envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok());
  EXPECT_EQ((*envelope)->request_id(), 0u);
  EXPECT_EQ((*envelope)->body_as_Goodbye()->reason()->str(), "kvstashd is stopping");

  bytes = EncodeChannelClosed("ring broken");
  envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
  ASSERT_TRUE(envelope.ok());
  EXPECT_EQ((*envelope)->request_id(), 0u);
  EXPECT_EQ((*envelope)->body_as_ChannelClosed()->reason()->str(), "ring broken");
}

}  // namespace
}  // namespace kvstash::server
