// Messages that pass the FlatBuffers Verifier but are half-valid (each once
// crashed or misled the daemon under the request fuzzer):
// a union that names a member without its table, text that is not UTF-8 or
// too long. Each is refused where messages are decoded, with the field named,
// and the daemon keeps serving, Describe and Stats included.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <zmq.hpp>

#include "harness.h"
#include "kvstash/proto/codec.h"
#include "raw_reply.h"

namespace kvstash::testing {
namespace {

class HostileInput : public RawWireTest {
 protected:
  void TearDown() override {
    if (!daemon_) return;
    // Alive, and what reads every registration still renders.
    EXPECT_TRUE(daemon_->running());
    auto ping = client_->Ping().get();
    EXPECT_TRUE(ping.ok()) << ping.status().ToString();
    auto describe = client_->Describe().get();
    ASSERT_TRUE(describe.ok()) << describe.status().ToString();
    EXPECT_TRUE(nlohmann::json::accept(*describe));
    auto stats = client_->Stats().get();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_TRUE(daemon_->running());
  }
  // RegisterKV of the fixture's engine memory (a real shm object, so that a
  // daemon without the checks accepts it), with the given names and, when
  // `hollow`, an allocation whose handle names a type but carries no table.
  proto::Bytes Register(const std::string& model, const std::string& salt, bool hollow = false) {
    const RegisterOptions options = engine_->Registration("unused");
    const HostShm& shm = std::get<HostShm>(options.allocations.front());
    flatbuffers::FlatBufferBuilder fbb;
    flatbuffers::Offset<wire::Allocation> allocation;
    if (hollow) {
      wire::AllocationBuilder builder(fbb);
      builder.add_handle_type(wire::MemoryHandle::HostShmHandle);
      allocation = builder.Finish();
    } else {
      auto handle = wire::CreateHostShmHandleDirect(fbb, shm.name.c_str(), shm.size_bytes);
      allocation = wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union());
    }
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers;
    for (const LayerDesc& layer : options.layers) {
      layers.push_back(wire::CreateLayerDesc(fbb, layer.allocation, layer.offset_bytes,
                                             proto::ToWire(fbb, layer.geometry)));
    }
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations{allocation};
    auto body =
        wire::CreateRegisterKVRequest(fbb, fbb.CreateString(model), fbb.CreateString(salt), 0, 1,
                                      fbb.CreateVector(allocations), fbb.CreateVector(layers));
    return proto::Finish(fbb, 77, wire::Body::RegisterKVRequest, body.Union());
  }
};

TEST_F(HostileInput, UnionTypeWithoutItsTableIsMalformed) {
  auto [code, message] = Send(Register("model-a", "", /*hollow=*/true));
  EXPECT_EQ(code, wire::ErrorCode::MalformedMessage) << message;
  EXPECT_NE(message.find("RegisterKVRequest.allocations[0].handle"), std::string::npos) << message;
  EXPECT_NE(message.find("HostShmHandle"), std::string::npos) << message;
}

TEST_F(HostileInput, ModelNameThatIsNotUtf8IsRefused) {
  auto [code, message] = Send(Register("llama\xff\xfe", ""));
  EXPECT_EQ(code, wire::ErrorCode::InvalidArgument) << message;
  EXPECT_NE(message.find("RegisterKVRequest.model"), std::string::npos) << message;
  EXPECT_NE(message.find("UTF-8"), std::string::npos) << message;
}

TEST_F(HostileInput, TenantSaltThatIsNotUtf8IsRefused) {
  auto [code, message] = Send(Register("model-b", "salt\xc0\x80"));
  EXPECT_EQ(code, wire::ErrorCode::InvalidArgument) << message;
  EXPECT_NE(message.find("RegisterKVRequest.tenant_salt"), std::string::npos) << message;
}

TEST_F(HostileInput, OverlongModelNameIsRefusedWithTheLimit) {
  auto [code, message] = Send(Register(std::string(300, 'm'), ""));
  EXPECT_EQ(code, wire::ErrorCode::InvalidArgument) << message;
  EXPECT_NE(message.find("300 bytes exceed the limit of 256"), std::string::npos) << message;
}

// A refusal of a well-structured message goes to the request that caused it
// (not to request id 0, which would fail every request the client has in
// flight): libkvstash reports it on that call alone.
TEST_F(HostileInput, RefusalReachesTheRequestThatCausedIt) {
  dealer_.send(zmq::buffer(Register(std::string(300, 'm'), "")), zmq::send_flags::none);
  zmq::message_t reply;
  ASSERT_TRUE(dealer_.recv(reply));
  auto envelope = proto::VerifyEnvelope(reply.data(), reply.size(), 1 << 24);
  ASSERT_TRUE(envelope.ok()) << envelope.status().ToString();
  EXPECT_EQ((*envelope)->request_id(), 77u);

  auto pending = client_->Ping();
  RegisterOptions options = engine_->Registration(std::string(300, 'm'));
  auto refused = client_->RegisterKV(options).get();
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("RegisterKVRequest.model"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(pending.get().ok());
}

TEST_F(HostileInput, WellFormedRegistrationStillWorks) {
  auto [code, message] = Send(Register("model-\xc3\xa4", "tenant"));
  EXPECT_EQ(code, wire::ErrorCode::Ok) << message;
  EXPECT_EQ(message, "RegisterKVReply");
}

}  // namespace
}  // namespace kvstash::testing
