// VerifyEnvelope walks every message along the schema: unions that name a
// member carry its table, strings are UTF-8 within their limits, required and
// non-empty fields are there, fixed-length vectors have their length.
#include <flatbuffers/reflection_generated.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvstash/proto/codec.h"
#include "kvstash/proto/kvstash_bfbs_generated.h"
#include "message_rules.h"

namespace kvstash::proto {
namespace {

using flatbuffers::FlatBufferBuilder;

Result<const wire::Envelope*> Verify(const Bytes& bytes) {
  return VerifyEnvelope(bytes.data(), bytes.size(), 1 << 20);
}

// Expects a failure with `code` whose message contains every one of `parts`.
void ExpectRejected(const Bytes& bytes, StatusCode code, const std::vector<std::string>& parts) {
  Result<const wire::Envelope*> got = Verify(bytes);
  ASSERT_FALSE(got.ok()) << "accepted; expected a message containing " << parts.front();
  EXPECT_EQ(got.status().code(), code) << got.status().ToString();
  for (const std::string& part : parts) {
    EXPECT_NE(got.status().message().find(part), std::string::npos)
        << "\"" << got.status().message() << "\" lacks \"" << part << "\"";
  }
}

flatbuffers::Offset<wire::LayerDesc> Layer(FlatBufferBuilder& fbb) {
  auto geometry =
      wire::CreateLayerGeometry(fbb, 16, 2, 16, 2, 128, 8192, 131072, 256, 128, wire::DType::BF16);
  return wire::CreateLayerDesc(fbb, 0, 0, geometry);
}

Bytes RegisterWith(const std::string& model, const std::string& salt,
                   flatbuffers::Offset<wire::Allocation> (*allocation)(FlatBufferBuilder&)) {
  FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::Allocation>> allocations{allocation(fbb)};
  std::vector<flatbuffers::Offset<wire::LayerDesc>> layers{Layer(fbb)};
  auto m = fbb.CreateString(model);
  auto s = fbb.CreateString(salt);
  auto body = wire::CreateRegisterKVRequest(fbb, m, s, 0, 1, fbb.CreateVector(allocations),
                                            fbb.CreateVector(layers));
  return Finish(fbb, 1, wire::Body::RegisterKVRequest, body.Union());
}

flatbuffers::Offset<wire::Allocation> ShmAllocation(FlatBufferBuilder& fbb) {
  auto shm = wire::CreateHostShmHandleDirect(fbb, "/kvstash-test", 1 << 20);
  return wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, shm.Union());
}

// A crash the request fuzzer found: a union type with no table behind it
// passes the FlatBuffers Verifier.
flatbuffers::Offset<wire::Allocation> TypeWithoutTable(FlatBufferBuilder& fbb) {
  wire::AllocationBuilder allocation(fbb);
  allocation.add_handle_type(wire::MemoryHandle::HostShmHandle);
  return allocation.Finish();
}

flatbuffers::Offset<wire::Allocation> CudaTypeWithoutTable(FlatBufferBuilder& fbb) {
  wire::AllocationBuilder allocation(fbb);
  allocation.add_handle_type(wire::MemoryHandle::CudaIpcHandle);
  return allocation.Finish();
}

flatbuffers::Offset<wire::Allocation> ShortIpcHandle(FlatBufferBuilder& fbb) {
  std::vector<uint8_t> handle(63), uuid(16);
  auto ipc = wire::CreateCudaIpcHandleDirect(fbb, &handle, 1 << 20, &uuid);
  return wire::CreateAllocation(fbb, wire::MemoryHandle::CudaIpcHandle, ipc.Union());
}

flatbuffers::Offset<wire::Allocation> NoHandle(FlatBufferBuilder& fbb) {
  wire::AllocationBuilder allocation(fbb);
  return allocation.Finish();
}

TEST(MessageRules, AcceptsAWellFormedRegistration) {
  Result<const wire::Envelope*> got = Verify(RegisterWith("llama-3-8b", "tenant-ä", ShmAllocation));
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST(MessageRules, RejectsAUnionTypeWithoutItsTable) {
  ExpectRejected(RegisterWith("m", "", TypeWithoutTable), StatusCode::kMalformedMessage,
                 {"RegisterKVRequest.allocations[0].handle", "HostShmHandle", "no table"});
  ExpectRejected(RegisterWith("m", "", CudaTypeWithoutTable), StatusCode::kMalformedMessage,
                 {"CudaIpcHandle", "no table"});
}

TEST(MessageRules, RejectsAMissingRequiredUnion) {
  ExpectRejected(RegisterWith("m", "", NoHandle), StatusCode::kInvalidArgument,
                 {"RegisterKVRequest.allocations[0].handle", "missing"});
}

TEST(MessageRules, RejectsAWrongLengthVectorInsideAUnionMember) {
  ExpectRejected(RegisterWith("m", "", ShortIpcHandle), StatusCode::kInvalidArgument,
                 {"allocations[0].handle<CudaIpcHandle>.ipc_handle", "63", "64"});
}

TEST(MessageRules, RejectsTextThatIsNotUtf8) {
  ExpectRejected(RegisterWith("llama\xff", "", ShmAllocation), StatusCode::kInvalidArgument,
                 {"RegisterKVRequest.model", "UTF-8", "byte 5"});
  ExpectRejected(RegisterWith("m", "salt\xc3", ShmAllocation), StatusCode::kInvalidArgument,
                 {"RegisterKVRequest.tenant_salt", "UTF-8"});
  ExpectRejected(RegisterWith(std::string("a\0b", 3), "", ShmAllocation),
                 StatusCode::kInvalidArgument, {"RegisterKVRequest.model", "UTF-8"});
}

TEST(MessageRules, RejectsTextOverItsLimit) {
  ExpectRejected(RegisterWith(std::string(257, 'm'), "", ShmAllocation),
                 StatusCode::kInvalidArgument, {"RegisterKVRequest.model", "257", "256"});
  EXPECT_TRUE(Verify(RegisterWith(std::string(256, 'm'), "", ShmAllocation)).ok());
  ExpectRejected(RegisterWith("", "", ShmAllocation), StatusCode::kInvalidArgument,
                 {"RegisterKVRequest.model", "empty"});
}

TEST(MessageRules, RejectsAnUnknownBodyMember) {
  FlatBufferBuilder fbb;
  auto ping = wire::CreatePingRequest(fbb);
  Bytes bytes = Finish(fbb, 1, wire::Body(200), ping.Union());
  ExpectRejected(bytes, StatusCode::kMalformedMessage, {"Envelope.body", "200", "does not exist"});
}

TEST(MessageRules, RejectsAStoreWithoutChunksOrKeysOrBlocks) {
  {
    FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> none;
    auto body = wire::CreateStoreRequest(fbb, 1, fbb.CreateVector(none));
    ExpectRejected(Finish(fbb, 1, wire::Body::StoreRequest, body.Union()),
                   StatusCode::kInvalidArgument, {"StoreRequest.chunks", "empty"});
  }
  {
    FlatBufferBuilder fbb;
    std::vector<uint32_t> blocks{1};
    auto chunk = wire::CreateChunkBlocks(fbb, nullptr, 16, fbb.CreateVector(blocks));
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks{chunk};
    auto body = wire::CreateRetrieveRequest(fbb, 1, fbb.CreateVector(chunks));
    ExpectRejected(Finish(fbb, 1, wire::Body::RetrieveRequest, body.Union()),
                   StatusCode::kInvalidArgument, {"RetrieveRequest.chunks[0].key", "missing"});
  }
  {
    FlatBufferBuilder fbb;
    wire::Key key;
    std::vector<uint32_t> blocks;
    auto chunk = wire::CreateChunkBlocks(fbb, &key, 16, fbb.CreateVector(blocks));
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks{chunk, chunk};
    auto body = wire::CreateStoreRequest(fbb, 1, fbb.CreateVector(chunks));
    ExpectRejected(Finish(fbb, 1, wire::Body::StoreRequest, body.Union()),
                   StatusCode::kInvalidArgument, {"StoreRequest.chunks[0].block_ids", "empty"});
  }
}

TEST(MessageRules, AcceptsALookupOfNoKeysButNotOfAbsentKeys) {
  FlatBufferBuilder fbb;
  auto body =
      wire::CreateLookupRequest(fbb, 1, fbb.CreateVectorOfStructs(std::vector<wire::Key>{}), 0);
  EXPECT_TRUE(Verify(Finish(fbb, 1, wire::Body::LookupRequest, body.Union())).ok());
  FlatBufferBuilder absent;
  auto no_keys = wire::CreateLookupRequest(absent, 1, 0, 0);
  ExpectRejected(Finish(absent, 1, wire::Body::LookupRequest, no_keys.Union()),
                 StatusCode::kInvalidArgument, {"LookupRequest.keys", "missing"});
}

TEST(MessageRules, Utf8CheckerFollowsTheStandard) {
  size_t bad = 99;
  EXPECT_TRUE(internal::IsCleanUtf8("", &bad));
  EXPECT_TRUE(internal::IsCleanUtf8("plain ascii", &bad));
  EXPECT_TRUE(internal::IsCleanUtf8("\xc3\xa4 \xe2\x82\xac \xf0\x9f\x98\x80", &bad));  // ä € 😀
  EXPECT_FALSE(internal::IsCleanUtf8("\xc0\x80", &bad));  // overlong NUL
  EXPECT_EQ(bad, 0u);
  EXPECT_FALSE(internal::IsCleanUtf8("ab\xe0\x80\xaf", &bad));  // overlong '/'
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(internal::IsCleanUtf8("\xed\xa0\x80", &bad));      // surrogate
  EXPECT_FALSE(internal::IsCleanUtf8("\xf4\x90\x80\x80", &bad));  // above U+10FFFF
  EXPECT_FALSE(internal::IsCleanUtf8("\xe2\x82", &bad));          // truncated
  EXPECT_FALSE(internal::IsCleanUtf8("\x80", &bad));              // lone continuation
  EXPECT_FALSE(internal::IsCleanUtf8(std::string_view("a\0", 2), &bad));
}

// Every string a client can send has a byte limit in the schema: a new
// request field without one fails here.
TEST(MessageRules, EveryRequestStringHasALimit) {
  const reflection::Schema* schema = reflection::GetSchema(wire::EnvelopeBinarySchema::data());
  const std::vector<std::string> request_side = {
      "HelloRequest",    "RegisterKVRequest", "Allocation",     "HostShmHandle",
      "CudaIpcHandle",   "LayerDesc",         "ChunkBlocks",    "StoreRequest",
      "RetrieveRequest", "LookupRequest",     "ReleaseRequest", "ClearRequest"};
  size_t strings = 0;
  for (const reflection::Object* object : *schema->objects()) {
    std::string name = object->name()->str();
    name = name.substr(name.rfind('.') + 1);
    if (std::find(request_side.begin(), request_side.end(), name) == request_side.end()) continue;
    for (const reflection::Field* field : *object->fields()) {
      if (field->type()->base_type() != reflection::String) continue;
      ++strings;
      EXPECT_NE(internal::DescribeFieldRules(name, field->name()->str()).find("max_bytes="),
                std::string::npos)
          << name << "." << field->name()->str() << " has no kvstash_max_bytes";
    }
  }
  EXPECT_GE(strings, 6u);
  EXPECT_EQ(internal::DescribeFieldRules("RegisterKVRequest", "model"), "max_bytes=256 non_empty");
  EXPECT_EQ(internal::DescribeFieldRules("CudaIpcHandle", "gpu_uuid"), "len=16");
}

}  // namespace
}  // namespace kvstash::proto
