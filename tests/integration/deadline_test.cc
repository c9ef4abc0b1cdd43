// Envelope.deadline_ns: a request whose deadline passed is not started, and a
// Retrieve writes no engine block after its deadline, also when the daemon
// itself was stopped meanwhile (SIGSTOP) and the engine has long been told
// TimedOut and reused its blocks.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "harness.h"
#include "kvstash/proto/codec.h"

namespace kvstash::testing {
namespace {

constexpr uint64_t kSeed = 0xdead11;
using Clock = std::chrono::steady_clock;

uint64_t NsFromNow(std::chrono::nanoseconds offset) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      (Clock::now() + offset).time_since_epoch())
                      .count());
}

// A raw connection that sets deadlines itself (libkvstash sets them too);
// it registers the fixture's engine memory as its own registration.
class Deadlines : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, 10000);
    dealer_.connect(daemon_->socket());
    const RegisterOptions options = engine_->Registration("test-model");
    flatbuffers::FlatBufferBuilder fbb;
    const HostShm& shm = std::get<HostShm>(options.allocations[0]);
    auto handle = wire::CreateHostShmHandleDirect(fbb, shm.name.c_str(), shm.size_bytes);
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations = {
        wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union())};
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers;
    for (const LayerDesc& l : options.layers) {
      layers.push_back(
          wire::CreateLayerDesc(fbb, l.allocation, l.offset_bytes, proto::ToWire(fbb, l.geometry)));
    }
    auto body = wire::CreateRegisterKVRequestDirect(fbb, "test-model", nullptr, 0, 1, &allocations,
                                                    &layers);
    const wire::Envelope* reply = Send(fbb, wire::Body::RegisterKVRequest, body.Union(), 0);
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->body_type(), wire::Body::RegisterKVReply);
    raw_id_ = reply->body_as_RegisterKVReply()->registration_id();
  }
  // Sends one envelope with `deadline_ns`; returns the verified reply.
  const wire::Envelope* Send(flatbuffers::FlatBufferBuilder& fbb, wire::Body type,
                             flatbuffers::Offset<void> body, uint64_t deadline_ns) {
    SendOnly(fbb, type, body, deadline_ns);
    return Receive();
  }
  void SendOnly(flatbuffers::FlatBufferBuilder& fbb, wire::Body type,
                flatbuffers::Offset<void> body, uint64_t deadline_ns) {
    wire::EnvelopeBuilder envelope(fbb);
    envelope.add_request_id(++request_id_);
    envelope.add_body_type(type);
    envelope.add_body(body);
    envelope.add_deadline_ns(deadline_ns);
    fbb.Finish(envelope.Finish(), wire::EnvelopeIdentifier());
    dealer_.send(zmq::buffer(fbb.GetBufferPointer(), fbb.GetSize()));
  }
  const wire::Envelope* Receive() {
    if (!dealer_.recv(reply_)) return nullptr;
    auto envelope = proto::VerifyEnvelope(reply_.data(), reply_.size(), 64 << 20);
    return envelope.ok() ? *envelope : nullptr;
  }
  flatbuffers::Offset<void> WireChunks(flatbuffers::FlatBufferBuilder& fbb, wire::Body type,
                                       const std::vector<ChunkBlocks>& chunks) {
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> wire_chunks;
    for (const ChunkBlocks& c : chunks) {
      const wire::Key key = proto::ToWire(c.key);
      wire_chunks.push_back(wire::CreateChunkBlocksDirect(fbb, &key, c.num_tokens, &c.block_ids));
    }
    return type == wire::Body::StoreRequest
               ? wire::CreateStoreRequestDirect(fbb, raw_id_, &wire_chunks).Union()
               : wire::CreateRetrieveRequestDirect(fbb, raw_id_, &wire_chunks).Union();
  }

  zmq::context_t context_;
  zmq::socket_t dealer_{context_, zmq::socket_type::dealer};
  zmq::message_t reply_;
  uint64_t request_id_ = 0;
  uint64_t raw_id_ = 0;
};

TEST_F(Deadlines, ARequestWhoseDeadlinePassedIsNotStarted) {
  const auto tokens = PromptTokens(1, 128, 0);
  engine_->Fill(kSeed, tokens, Blocks(0, 8));
  flatbuffers::FlatBufferBuilder fbb;
  auto body = WireChunks(fbb, wire::Body::StoreRequest, Chunks(tokens, Blocks(0, 8)));
  const wire::Envelope* reply =
      Send(fbb, wire::Body::StoreRequest, body, NsFromNow(-std::chrono::milliseconds(1)));
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->body_type(), wire::Body::ErrorReply);
  EXPECT_EQ(reply->body_as_ErrorReply()->code(), wire::ErrorCode::TimedOut);
  EXPECT_EQ(Counter("requests_timed_out"), 1u);
  // Nothing was stored.
  auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, tokens.data(), tokens.size()), 1).get();
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_chunks, 0u);
  // A deadline in the future is served.
  flatbuffers::FlatBufferBuilder again;
  auto body2 = WireChunks(again, wire::Body::StoreRequest, Chunks(tokens, Blocks(0, 8)));
  reply = Send(again, wire::Body::StoreRequest, body2, NsFromNow(std::chrono::seconds(10)));
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->body_type(), wire::Body::StoreReply);
}

TEST_F(Deadlines, ARetrieveTheEngineGaveUpOnWritesNothingAfterADaemonStall) {
  const auto tokens = PromptTokens(2, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(kSeed, tokens, Blocks(0, 8))) {
    ASSERT_EQ(o.result, ChunkResult::kStored);
  }
  engine_->Poison(Blocks(40, 8));
  ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
  flatbuffers::FlatBufferBuilder fbb;
  auto body = WireChunks(fbb, wire::Body::RetrieveRequest, Chunks(tokens, Blocks(40, 8)));
  SendOnly(fbb, wire::Body::RetrieveRequest, body, NsFromNow(std::chrono::milliseconds(100)));
  // The engine's deadline passes while the daemon is stopped; it reuses its
  // blocks (here: poisons them again) and the daemon resumes.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  engine_->Poison(Blocks(40, 8), 0x77);
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  const wire::Envelope* reply = Receive();
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->body_type(), wire::Body::ErrorReply);
  EXPECT_EQ(reply->body_as_ErrorReply()->code(), wire::ErrorCode::TimedOut);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(engine_->CountNotPoison(Blocks(40, 8), 0, 128, 0x77), 0u)
      << "the daemon wrote blocks of a retrieve past its deadline";
}

TEST_F(Deadlines, ChunksCutOffMidCopyAreTimedOutAndNoBlockChangesAfterTheReply) {
  // A retrieve of 64 chunks with a deadline that may pass during the copy:
  // each chunk is either retrieved whole or Failed with TimedOut, and after
  // the reply nothing in the engine's memory changes.
  const auto tokens = PromptTokens(3, 64 * 64, 0);
  engine_->Fill(kSeed, tokens, Blocks(0, 256));
  auto stored = client_->Store(reg_.id, Chunks(tokens, Blocks(0, 256))).get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  size_t cut = 0, whole = 0;
  for (auto offset : {std::chrono::microseconds(200), std::chrono::microseconds(2000),
                      std::chrono::microseconds(30000), std::chrono::microseconds(10000000)}) {
    engine_->Poison(Blocks(0, 256));
    flatbuffers::FlatBufferBuilder fbb;
    auto body = WireChunks(fbb, wire::Body::RetrieveRequest, Chunks(tokens, Blocks(0, 256)));
    const wire::Envelope* reply = Send(fbb, wire::Body::RetrieveRequest, body, NsFromNow(offset));
    ASSERT_NE(reply, nullptr);
    if (reply->body_type() == wire::Body::ErrorReply) {
      EXPECT_EQ(reply->body_as_ErrorReply()->code(), wire::ErrorCode::TimedOut);
      continue;
    }
    ASSERT_EQ(reply->body_type(), wire::Body::RetrieveReply);
    const auto* chunks = reply->body_as_RetrieveReply()->chunks();
    ASSERT_EQ(chunks->size(), 64u);
    for (size_t i = 0; i < chunks->size(); ++i) {
      if (chunks->Get(i)->result() == wire::ChunkResult::Retrieved) {
        ++whole;
        EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(0, 256), i * 64, (i + 1) * 64), 0u)
            << i;
      } else {
        ++cut;
        EXPECT_EQ(chunks->Get(i)->result(), wire::ChunkResult::Failed);
        EXPECT_EQ(chunks->Get(i)->error(), wire::ErrorCode::TimedOut);
      }
    }
    const uint64_t poisoned = engine_->CountNotPoison(Blocks(0, 256), 0, tokens.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(engine_->CountNotPoison(Blocks(0, 256), 0, tokens.size()), poisoned);
  }
  std::printf("chunks retrieved whole: %zu, cut off by the deadline: %zu\n", whole, cut);
  EXPECT_GE(whole, 64u) << "a deadline 10 s away cuts nothing";
}

}  // namespace
}  // namespace kvstash::testing
