// The server's edge: half-valid tables that pass the FlatBuffers Verifier
// (a union type with no table, a missing vector) become InvalidArgument at
// decode, so no handler ever sees them.
#include "wire_codec.h"

#include <gtest/gtest.h>

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
       {wire::MemoryHandle::HostShmHandle, wire::MemoryHandle::CudaIpcHandle}) {
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
  EXPECT_EQ(store.chunks[0].block_ids, blocks);
}

}  // namespace
}  // namespace kvstash::server
