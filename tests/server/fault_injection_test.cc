// A Service on the host backend wrapped in the fault-injecting backend:
// copies that fail part-way or stall. Failures come back per chunk, a failed
// store is never visible, a stalled copy gets exactly one reply, and nothing
// stale is served after a failed copy.
#include "kvstash/backends/fault_injection_backend.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <string_view>
#include <thread>

#include "engine_kv.h"
#include "kvstash/backends/backend_factory.h"
#include "kvstash/client.h"
#include "reply_queue.h"
#include "service.h"

namespace kvstash::server {
namespace {

using backends::FaultInjectionBackend;
using backends::FaultRule;

// A connection of this process: its credentials open the shm it creates.
Peer Self(const char* id) { return Peer{id, PeerCredentials{::getuid(), ::getgid(), ::getpid()}}; }

// The L1 pool is pinned in the background: true once all of it is ready,
// read from the gauges the metrics endpoint shows.
bool L1Ready(const Service& service) {
  uint64_t capacity = 0, ready = 0;
  for (const Gauge& g : service.ReadStats().gauges) {
    if (std::string_view(g.name) == "l1_capacity_bytes") capacity = g.value;
    if (std::string_view(g.name) == "l1_ready_bytes") ready = g.value;
  }
  return capacity > 0 && ready >= capacity;
}

using kvstash::testing::Blocks;
using kvstash::testing::EngineKv;
using kvstash::testing::EngineShape;
using kvstash::testing::PromptTokens;

class FaultInjection : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = EngineKv::Create(EngineShape{});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_.emplace(std::move(*engine));
    config::ServerConfig config;
    config.backend = config::BackendKind::kHost;
    config.l1_gb = 32.0 / 1024;
    config.l1_slice_mb = 4;
    config.chunk_tokens = 64;
    config.peer_timeout_ms = 0;
    config.copy_threads = 2;
    config.pin_threads = 1;
    auto backend = std::make_unique<FaultInjectionBackend>(backends::CreateHostBackend(2));
    faults_ = backend.get();
    auto service = Service::Create(config, std::move(backend), replies_);
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    service_ = std::move(*service);
    // The pool is prepared in the background; a store before that skips.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!L1Ready(*service_) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(L1Ready(*service_));
    Register();
  }

  // Handles one message; returns every reply it caused (the immediate one,
  // or those that came through the reply queue once its copies finished).
  std::vector<proto::Bytes> Call(const proto::Bytes& message) {
    std::vector<proto::Bytes> out;
    std::optional<proto::Bytes> now =
        service_->Handle(Self("peer"), message.data(), message.size());
    if (now) out.push_back(std::move(*now));
    while (service_->deferred_in_flight() > 0) std::this_thread::yield();
    for (OutgoingReply& r : replies_.TakeAll()) out.push_back(std::move(r.bytes));
    return out;
  }
  static const wire::Envelope& Open(const proto::Bytes& bytes) {
    auto envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), 1 << 26);
    EXPECT_TRUE(envelope.ok()) << envelope.status().ToString();
    return **envelope;
  }

  void Register() {
    const RegisterOptions options = engine_->Registration("fault-model");
    const HostShm& shm = std::get<HostShm>(options.allocations.front());
    flatbuffers::FlatBufferBuilder fbb;
    auto handle = wire::CreateHostShmHandleDirect(fbb, shm.name.c_str(), shm.size_bytes);
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations{
        wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union())};
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers;
    for (const LayerDesc& l : options.layers) {
      layers.push_back(
          wire::CreateLayerDesc(fbb, l.allocation, l.offset_bytes, proto::ToWire(fbb, l.geometry)));
    }
    auto body =
        wire::CreateRegisterKVRequestDirect(fbb, "fault-model", "", 0, 1, &allocations, &layers);
    const auto replies = Call(proto::Finish(fbb, 1, wire::Body::RegisterKVRequest, body.Union()));
    ASSERT_EQ(replies.size(), 1u);
    const auto* reply = Open(replies[0]).body_as_RegisterKVReply();
    ASSERT_NE(reply, nullptr);
    reg_.id = reply->registration_id();
    reg_.chunk_tokens = reply->chunk_tokens();
    reg_.chunk_bytes = reply->chunk_bytes();
    reg_.block_tokens = reply->block_tokens();
    std::copy(reply->namespace_id()->begin(), reply->namespace_id()->end(),
              reg_.namespace_id.begin());
  }

  std::vector<ChunkBlocks> Chunks(const std::vector<int32_t>& tokens,
                                  const std::vector<uint32_t>& blocks) {
    auto chunks = PromptChunks(reg_, tokens.data(), tokens.size(), blocks.data(), blocks.size());
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    return *chunks;
  }
  proto::Bytes TransferMessage(uint64_t id, Direction direction,
                               const std::vector<ChunkBlocks>& chunks) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::ChunkBlocks>> list;
    for (const ChunkBlocks& c : chunks) {
      const wire::Key key = proto::ToWire(c.key);
      list.push_back(wire::CreateChunkBlocksDirect(fbb, &key, c.num_tokens, &c.block_ids));
    }
    if (direction == Direction::kStore) {
      auto body = wire::CreateStoreRequestDirect(fbb, reg_.id, &list);
      return proto::Finish(fbb, id, wire::Body::StoreRequest, body.Union());
    }
    auto body = wire::CreateRetrieveRequestDirect(fbb, reg_.id, &list);
    return proto::Finish(fbb, id, wire::Body::RetrieveRequest, body.Union());
  }
  struct Outcome {
    wire::ChunkResult result;
    std::string message;
  };
  std::vector<Outcome> Transfer(Direction direction, const std::vector<ChunkBlocks>& chunks) {
    const auto replies = Call(TransferMessage(7, direction, chunks));
    EXPECT_EQ(replies.size(), 1u);
    const wire::Envelope& e = Open(replies.at(0));
    const auto* outcomes = direction == Direction::kStore ? e.body_as_StoreReply()->chunks()
                                                          : e.body_as_RetrieveReply()->chunks();
    std::vector<Outcome> out;
    for (const wire::ChunkOutcome* o : *outcomes) {
      out.push_back({o->result(), o->message() ? o->message()->str() : ""});
    }
    return out;
  }
  uint32_t Hits(const std::vector<ChunkBlocks>& chunks) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<wire::Key> keys;
    for (const ChunkBlocks& c : chunks) keys.push_back(proto::ToWire(c.key));
    auto body = wire::CreateLookupRequest(fbb, reg_.id, fbb.CreateVectorOfStructs(keys), 0);
    const auto replies = Call(proto::Finish(fbb, 9, wire::Body::LookupRequest, body.Union()));
    const auto* reply = Open(replies.at(0)).body_as_LookupReply();
    if (reply && reply->lease_id()) {
      flatbuffers::FlatBufferBuilder release;
      Call(proto::Finish(release, 10, wire::Body::ReleaseRequest,
                         wire::CreateReleaseRequest(release, reply->lease_id()).Union()));
    }
    return reply ? reply->hit_chunks() : ~0u;
  }

  ReplyQueue replies_;
  FaultInjectionBackend* faults_ = nullptr;
  std::unique_ptr<Service> service_;
  std::optional<EngineKv> engine_;
  kvstash::RegisteredKv reg_;
};

TEST_F(FaultInjection, StoreFailingPartWayFailsEveryChunkAndLeavesNothingVisible) {
  const auto tokens = PromptTokens(1, 192, 0);
  const auto chunks = Chunks(tokens, Blocks(0, 12));
  engine_->Fill(1, tokens, Blocks(0, 12));
  // Chunk 0 is gathered into its slot for real, then the copy fails.
  faults_->AddRule({FaultRule::Action::kFail, Direction::kStore, 1, 1});
  const auto failed = Transfer(Direction::kStore, chunks);
  ASSERT_EQ(failed.size(), 3u);
  for (const Outcome& o : failed) {
    EXPECT_EQ(o.result, wire::ChunkResult::Failed);
    EXPECT_EQ(o.message, "injected copy failure");
  }
  EXPECT_EQ(Hits(chunks), 0u);

  // The engine's blocks now hold other bytes under the same keys: the next
  // store takes them (nothing was half-committed), and a retrieve returns
  // them, never the bytes of the failed attempt.
  engine_->Fill(2, tokens, Blocks(0, 12));
  for (const Outcome& o : Transfer(Direction::kStore, chunks)) {
    EXPECT_EQ(o.result, wire::ChunkResult::Stored) << o.message;
  }
  engine_->Poison(Blocks(100, 12));
  for (const Outcome& o : Transfer(Direction::kRetrieve, Chunks(tokens, Blocks(100, 12)))) {
    EXPECT_EQ(o.result, wire::ChunkResult::Retrieved) << o.message;
  }
  EXPECT_EQ(engine_->CountMismatches(2, tokens, Blocks(100, 12), 0, 192), 0u);
}

TEST_F(FaultInjection, RetrieveFailingPartWayFailsPerChunkAndTheStoredDataStaysIntact) {
  const auto tokens = PromptTokens(3, 128, 0);
  engine_->Fill(3, tokens, Blocks(0, 8));
  for (const Outcome& o : Transfer(Direction::kStore, Chunks(tokens, Blocks(0, 8)))) {
    ASSERT_EQ(o.result, wire::ChunkResult::Stored);
  }
  // The second retrieve fails after scattering its first chunk.
  faults_->AddRule({FaultRule::Action::kFail, Direction::kRetrieve, 2, 1,
                    std::chrono::milliseconds(0), Status::DeviceError("lost the copy engine")});
  engine_->Poison(Blocks(40, 8));
  for (const Outcome& o : Transfer(Direction::kRetrieve, Chunks(tokens, Blocks(40, 8)))) {
    EXPECT_EQ(o.result, wire::ChunkResult::Retrieved);
  }
  engine_->Poison(Blocks(60, 8));
  const auto failed = Transfer(Direction::kRetrieve, Chunks(tokens, Blocks(60, 8)));
  ASSERT_EQ(failed.size(), 2u);
  for (const Outcome& o : failed) {
    EXPECT_EQ(o.result, wire::ChunkResult::Failed);
    EXPECT_EQ(o.message, "lost the copy engine");
  }
  // Still stored, still whole.
  EXPECT_EQ(Hits(Chunks(tokens, Blocks(0, 8))), 2u);
  engine_->Poison(Blocks(80, 8));
  for (const Outcome& o : Transfer(Direction::kRetrieve, Chunks(tokens, Blocks(80, 8)))) {
    EXPECT_EQ(o.result, wire::ChunkResult::Retrieved);
  }
  EXPECT_EQ(engine_->CountMismatches(3, tokens, Blocks(80, 8), 0, 128), 0u);
  EXPECT_EQ(faults_->copies(Direction::kRetrieve), 3u);
}

TEST_F(FaultInjection, StalledCopyGetsExactlyOneReplyAndDoesNotBlockOthers) {
  const auto tokens = PromptTokens(4, 64, 0);
  engine_->Fill(4, tokens, Blocks(0, 4));
  faults_->AddRule(
      {FaultRule::Action::kStall, Direction::kStore, 1, 0, std::chrono::milliseconds(300)});
  const auto started = std::chrono::steady_clock::now();
  const proto::Bytes store = TransferMessage(21, Direction::kStore, Chunks(tokens, Blocks(0, 4)));
  EXPECT_FALSE(service_->Handle(Self("peer"), store.data(), store.size()).has_value());
  // The frontend answers others while the copy stalls.
  flatbuffers::FlatBufferBuilder fbb;
  const proto::Bytes ping =
      proto::Finish(fbb, 22, wire::Body::PingRequest, wire::CreatePingRequest(fbb).Union());
  auto pong = service_->Handle(Self("other"), ping.data(), ping.size());
  ASSERT_TRUE(pong.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(200));
  EXPECT_EQ(service_->deferred_in_flight(), 1u);
  while (service_->deferred_in_flight() > 0) std::this_thread::yield();
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::vector<OutgoingReply> replies = replies_.TakeAll();
  ASSERT_EQ(replies.size(), 1u);
  const wire::Envelope& e = Open(replies[0].bytes);
  EXPECT_EQ(e.request_id(), 21u);
  ASSERT_EQ(e.body_type(), wire::Body::StoreReply);
  for (const wire::ChunkOutcome* o : *e.body_as_StoreReply()->chunks()) {
    EXPECT_EQ(o->result(), wire::ChunkResult::Stored);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(replies_.TakeAll().empty());
}

}  // namespace
}  // namespace kvstash::server
