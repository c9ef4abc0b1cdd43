// Every malformed, truncated, unknown, oversized or out-of-range request gets
// an error reply with a clear message; the daemon keeps serving, and what it
// stored stays intact.
#include <gtest/gtest.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "harness.h"
#include "kvstash/proto/codec.h"
#include "raw_reply.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0xbad;

class BadInput : public RawWireTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    return {"--chunk-tokens",           "64", "--l1-gb",          "0.03125", "--l1-slice-mb", "4",
            "--max-chunks-per-request", "8",  "--max-message-mb", "1"};
  }
  void SetUp() override {
    RawWireTest::SetUp();
    if (HasFatalFailure()) return;
    // Something stored before the abuse, checked after it.
    kept_ = PromptTokens(7, 128, 0);
    FillAndStore(kSeed, kept_, Blocks(0, 8));
  }
  void TearDown() override {
    if (!daemon_) return;
    // Still serving, and the stored chunks are intact.
    engine_->Poison(Blocks(200, 8));
    auto got = client_->Retrieve(reg_.id, Chunks(kept_, Blocks(200, 8))).get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (const auto& o : *got) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
    EXPECT_EQ(engine_->CountMismatches(kSeed, kept_, Blocks(200, 8), 0, 128), 0u);
    EXPECT_TRUE(daemon_->running());
  }
  // Sends raw frames (a multi-part message); returns the reply's (code, message).
  std::pair<wire::ErrorCode, std::string> SendFrames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      dealer_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    return ReadRawReply(dealer_);
  }
  static std::string Bytes(const proto::Bytes& b) { return std::string(b.begin(), b.end()); }

  std::vector<int32_t> kept_;
};

TEST_F(BadInput, GarbageIsMalformed) {
  auto [code, message] = SendFrames({"this is not a flatbuffer at all"});
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage);
  EXPECT_NE(message.find("identifier"), std::string::npos) << message;
  std::tie(code, message) = SendFrames({""});
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage) << message;
}

TEST_F(BadInput, TruncatedEnvelopeIsMalformed) {
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreateLookupRequest(fbb, reg_.id,
                                        fbb.CreateVectorOfStructs(std::vector<wire::Key>(4)), 0);
  std::string whole = Bytes(proto::Finish(fbb, 42, wire::Body::LookupRequest, body.Union()));
  auto [code, message] = SendFrames({whole.substr(0, whole.size() / 2)});
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage) << message;
  // Flipped offsets inside an otherwise complete message.
  std::string corrupt = whole;
  for (size_t i = 8; i < corrupt.size(); i += 3) corrupt[i] = char(0xff);
  std::tie(code, message) = SendFrames({corrupt});
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage) << message;
}

TEST_F(BadInput, MultiFrameMessageIsMalformed) {
  flatbuffers::FlatBufferBuilder fbb;
  auto ping = wire::CreatePingRequest(fbb);
  std::string msg = Bytes(proto::Finish(fbb, 1, wire::Body::PingRequest, ping.Union()));
  auto [code, message] = SendFrames({"", msg});
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage);
  EXPECT_NE(message.find("one frame"), std::string::npos) << message;
}

TEST_F(BadInput, AReplyIsNotARequest) {
  flatbuffers::FlatBufferBuilder fbb;
  auto reply = wire::CreatePingReply(fbb, 5);
  auto [code, message] =
      SendFrames({Bytes(proto::Finish(fbb, 3, wire::Body::PingReply, reply.Union()))});
  EXPECT_EQ(code, wire::ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("PingReply"), std::string::npos) << message;
}

TEST_F(BadInput, OversizedMessageIsTooLarge) {
  flatbuffers::FlatBufferBuilder fbb;
  auto keys = fbb.CreateVectorOfStructs(std::vector<wire::Key>(48 * 1024));  // 1.5 MiB
  auto body = wire::CreateLookupRequest(fbb, reg_.id, keys, 0);
  auto [code, message] =
      SendFrames({Bytes(proto::Finish(fbb, 9, wire::Body::LookupRequest, body.Union()))});
  EXPECT_EQ(code, wire::ErrorCode::TooLarge) << message;
}

TEST_F(BadInput, WrongProtocolVersionIsRefused) {
  flatbuffers::FlatBufferBuilder fbb;
  auto hello = wire::CreateHelloRequestDirect(fbb, 999, "time traveller");
  auto [code, message] =
      SendFrames({Bytes(proto::Finish(fbb, 4, wire::Body::HelloRequest, hello.Union()))});
  EXPECT_EQ(code, wire::ErrorCode::UnsupportedVersion);
  EXPECT_NE(message.find("999"), std::string::npos) << message;
}

TEST_F(BadInput, UnknownRegistrationIsNotFound) {
  auto chunks = Chunks(PromptTokens(1, 64, 0), Blocks(0, 4));
  auto got = client_->Store(reg_.id + 1000, chunks).get();
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find(std::to_string(reg_.id + 1000)), std::string::npos);
  EXPECT_EQ(client_->Lookup(999, {ChunkKey{}}).get().status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->UnregisterKV(999).get().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Release(123456).get().status().code(), StatusCode::kNotFound);
}

TEST_F(BadInput, OutOfRangeBlockIsRefusedBeforeAnyCopy) {
  const auto tokens = PromptTokens(2, 128, 0);
  auto chunks = Chunks(tokens, Blocks(0, 8));
  chunks[1].block_ids[2] = 5000;
  auto got = client_->Store(reg_.id, chunks).get();
  ASSERT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(got.status().message().find("block id 5000 out of range [0, 256)"), std::string::npos)
      << got.status().message();
  // Nothing of the request was stored, not even its valid first chunk.
  auto hit = client_->Lookup(reg_.id, {chunks[0].key}).get();
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_chunks, 0u);
  auto read = client_->Retrieve(reg_.id, Chunks(kept_, {0, 1, 2, 3, 4, 5, 6, 9999})).get();
  EXPECT_EQ(read.status().code(), StatusCode::kOutOfRange);
}

TEST_F(BadInput, TooManyChunksIsTooLarge) {
  const auto tokens = PromptTokens(3, 64 * 9, 0);
  // The client library refuses before sending...
  auto got = client_->Store(reg_.id, Chunks(tokens, Blocks(0, 36))).get();
  EXPECT_EQ(got.status().code(), StatusCode::kTooLarge);
  // ...and the daemon refuses what a client sends anyway.
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks;
  for (const ChunkBlocks& c : Chunks(tokens, Blocks(0, 36))) {
    const wire::Key key = proto::ToWire(c.key);
    chunks.push_back(wire::CreateChunkBlocksDirect(fbb, &key, c.num_tokens, &c.block_ids));
  }
  auto body = wire::CreateStoreRequestDirect(fbb, reg_.id, &chunks);
  auto [code, message] =
      SendFrames({Bytes(proto::Finish(fbb, 5, wire::Body::StoreRequest, body.Union()))});
  EXPECT_EQ(code, wire::ErrorCode::TooLarge);
  EXPECT_NE(message.find("limit is 8"), std::string::npos) << message;
}

TEST_F(BadInput, BadTokenCountsAreInvalid) {
  auto chunks = Chunks(PromptTokens(4, 64, 0), Blocks(0, 4));
  chunks[0].num_tokens = 0;
  EXPECT_EQ(client_->Store(reg_.id, chunks).get().status().code(), StatusCode::kInvalidArgument);
  chunks[0].num_tokens = 65;
  EXPECT_EQ(client_->Store(reg_.id, chunks).get().status().code(), StatusCode::kInvalidArgument);
  chunks[0].num_tokens = 64;
  chunks[0].block_ids.resize(2);  // 64 tokens need 4 blocks of 16
  auto got = client_->Store(reg_.id, chunks).get();
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("needs 4"), std::string::npos) << got.status().message();
}

// A chunk without block ids breaks the message rules: the daemon answers at
// once (the caller does not wait out its deadline), for a store and a retrieve.
TEST_F(BadInput, AChunkWithoutBlockIdsIsRefusedAtOnce) {
  auto chunks = Chunks(PromptTokens(4, 64, 0), Blocks(0, 4));
  chunks.back().block_ids.clear();
  for (const bool store : {true, false}) {
    const auto start = std::chrono::steady_clock::now();
    auto got = store ? client_->Store(reg_.id, chunks).get().status()
                     : client_->Retrieve(reg_.id, chunks).get().status();
    EXPECT_EQ(got.code(), StatusCode::kInvalidArgument) << got.ToString();
    EXPECT_NE(got.message().find("block_ids: must not be empty"), std::string::npos)
        << got.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
        << (store ? "store" : "retrieve") << " waited for its deadline";
  }
}

// A retrieve that names fewer blocks than a stored chunk's tokens need
// fails that chunk alone, with the rule it breaks; the others arrive.
TEST_F(BadInput, ARetrieveChunkWithTooFewBlocksFailsAlone) {
  auto chunks = Chunks(kept_, Blocks(100, 8));
  chunks[1].block_ids.resize(2);  // its 64 stored tokens need 4 blocks of 16
  engine_->Poison(Blocks(100, 8));
  auto got = client_->Retrieve(reg_.id, chunks).get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].result, ChunkResult::kRetrieved);
  EXPECT_EQ((*got)[1].result, ChunkResult::kFailed);
  EXPECT_EQ((*got)[1].error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE((*got)[1].error.message().find("which need 4 blocks; the request names 2"),
            std::string::npos)
      << (*got)[1].error.ToString();
  EXPECT_EQ(engine_->CountMismatches(kSeed, kept_, Blocks(100, 8), 0, 64), 0u);
}

TEST_F(BadInput, BadRegistrationsAreRefused) {
  RegisterOptions options = engine_->Registration("m");
  // Memory that does not exist.
  std::get<HostShm>(options.allocations[0]).name = "/kvstash-does-not-exist";
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kNotFound);
  // A layer reaching past its allocation.
  options = engine_->Registration("m");
  options.layers.back().offset_bytes += 4096;
  auto got = client_->RegisterKV(options).get();
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(got.status().message().find("allocation holds"), std::string::npos)
      << got.status().message();
  // Declaring more bytes than the shared memory holds.
  options = engine_->Registration("m");
  std::get<HostShm>(options.allocations[0]).size_bytes *= 2;
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kOutOfRange);
  // Overlapping geometry.
  options = engine_->Registration("m");
  options.layers[0].geometry.token_stride = 8;
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kInvalidArgument);
  // A path instead of a shm name.
  options = engine_->Registration("m");
  std::get<HostShm>(options.allocations[0]).name = "/../etc/passwd";
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kInvalidArgument);
  // No model.
  options = engine_->Registration("");
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kInvalidArgument);
  // tp_rank past tp_size.
  options = engine_->Registration("m");
  options.tp_rank = 2;
  options.tp_size = 2;
  EXPECT_EQ(client_->RegisterKV(options).get().status().code(), StatusCode::kInvalidArgument);
  EXPECT_GE(Counter("request_errors"), 7u);
}

}  // namespace
}  // namespace kvstash::testing

namespace kvstash::testing {
namespace {

// It passes the FlatBuffers Verifier; the old handler dereferenced the null
// table (SIGSEGV). Now it is refused where messages are decoded.
TEST_F(BadInput, AnAllocationWithAHandleTypeButNoTableIsRefused) {
  for (wire::MemoryHandle type :
       {wire::MemoryHandle::HostShmHandle, wire::MemoryHandle::CudaIpcHandle,
        wire::MemoryHandle::PeerFdHandle}) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations = {
        wire::CreateAllocation(fbb, type, 0)};
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers = {
        wire::CreateLayerDesc(fbb, 0, 0, proto::ToWire(fbb, LayerGeometry{}))};
    auto body = wire::CreateRegisterKVRequestDirect(fbb, "m", nullptr, 0, 1, &allocations, &layers);
    auto [code, message] =
        SendFrames({Bytes(proto::Finish(fbb, 9, wire::Body::RegisterKVRequest, body.Union()))});
    EXPECT_TRUE(code == wire::ErrorCode::InvalidArgument ||
                code == wire::ErrorCode::MalformedMessage)
        << message;
    EXPECT_TRUE(daemon_->running());
  }
}

}  // namespace
}  // namespace kvstash::testing
