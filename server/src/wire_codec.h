// The server's edge: a verified Envelope becomes one plain request struct,
// and a plain reply becomes bytes. Handlers never see a FlatBuffers table:
// every field they read was checked here (present where required, union
// members non-null, strings within their sizes, counts within the limits),
// so a half-valid table (a union type with a null table, a missing vector)
// is InvalidArgument at decode and reaches no handler.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kvstash/completion_board.h"  // BoardSignal: GPU-side completion
#include "kvstash/keys.h"
#include "kvstash/proto/codec.h"
#include "kvstash/status.h"
#include "registry.h"
#include "stats.h"

namespace kvstash::server {

// ---- Requests ----
// A chunk's block ids, read in place: no handler copies them before the
// transfer job that holds them for its copy.
class BlockIdView {
 public:
  BlockIdView() = default;
  BlockIdView(const uint32_t* data, size_t size) : data_(data), size_(size) {}
  const uint32_t* data() const { return data_; }
  size_t size() const { return size_; }
  const uint32_t* begin() const { return data_; }
  const uint32_t* end() const { return data_ + size_; }

 private:
  const uint32_t* data_ = nullptr;
  size_t size_ = 0;
};

struct ChunkRequest {
  ChunkKey key{};
  uint32_t num_tokens = 0;  // Store; ignored by Retrieve
  // In the request's message, valid while the frontend handles it, or in
  // the request's owned_block_ids (CopyRequest::OwnBlockIds).
  BlockIdView block_ids;
};
struct HelloRequest {
  uint32_t protocol_version = 0;
};
struct RegisterRequest {
  RegistrationRequest registration;
};
struct UnregisterRequest {
  uint64_t registration_id = 0;
};
// What a Store and a Retrieve both carry.
struct CopyRequest {
  uint64_t registration_id = 0;
  std::vector<ChunkRequest> chunks;  // 1 to max_chunks_per_request
  std::optional<BoardSignal> signal;
  std::vector<uint32_t> owned_block_ids;  // empty while the ids are read in place

  // Copies every chunk's block ids into owned_block_ids and points the
  // chunks there: for a request handled after its message is gone.
  void OwnBlockIds();
};
struct StoreRequest : CopyRequest {};
struct RetrieveRequest : CopyRequest {
  uint32_t skip_tokens = 0;
  uint64_t lease_id = 0;
};
struct LookupRequest {
  uint64_t registration_id = 0;
  std::vector<ChunkKey> keys;  // 0 to max_chunks_per_request
  uint32_t lease_ms = 0;
  bool prefetch = false;
};
struct ReleaseRequest {
  uint64_t lease_id = 0;
};
struct ClearRequest {
  std::string model, tenant_salt;
};
struct DescribeRequest {};
struct StatsRequest {};
struct PingRequest {};

using RequestBody = std::variant<HelloRequest, RegisterRequest, UnregisterRequest, StoreRequest,
                                 RetrieveRequest, LookupRequest, ReleaseRequest, ClearRequest,
                                 DescribeRequest, StatsRequest, PingRequest>;

struct DecodeLimits {
  uint32_t max_chunks_per_request = 1024;
};
// Layers and allocations of one RegisterKV.
inline constexpr size_t kMaxLayers = 4096;

RequestKind KindOf(const RequestBody& body);
// The body of an envelope that passed proto::VerifyEnvelope (the Verifier
// and the schema's rules: presence, text, sizes); checks what the schema
// cannot say (configured limits) and returns plain structs.
Result<RequestBody> DecodeRequest(const wire::Envelope& envelope, const DecodeLimits& limits);

// ---- Replies ----
struct ChunkOutcome {
  ChunkResult result = ChunkResult::kFailed;
  uint32_t num_tokens = 0;
  Status error;  // with kFailed
};
struct HelloReply {
  std::string server_version;
  std::array<uint8_t, 16> boot_id{};
  uint32_t chunk_tokens = 0;
  uint32_t max_chunks_per_request = 0;
  uint64_t max_message_bytes = 0;
  std::string backend;
  uint32_t peer_timeout_ms = 0;
  uint32_t pid = 0;
};
struct RegisterReply {
  std::shared_ptr<const Registration> registration;
};
struct UnregisterReply {};
struct StoreReply {
  std::vector<ChunkOutcome> chunks;
};
struct RetrieveReply {
  std::vector<ChunkOutcome> chunks;
};
struct LookupReply {
  uint32_t hit_chunks = 0;
  uint64_t hit_tokens = 0;
  uint64_t lease_id = 0;
  uint32_t lease_expires_ms = 0;
  std::vector<uint8_t> hit_tiers;  // wire::TierLevel per hit
  uint32_t prefetch_pending = 0;
  bool lease_truncated = false;
};
struct ReleaseReply {
  uint32_t released_chunks = 0;
};
struct ClearReply {
  uint64_t cleared_chunks = 0;
};
struct DescribeReply {
  std::string json;
};
struct StatsReply {
  std::vector<Stats::Counter> counters;
  std::string json;
};
struct PingReply {
  uint64_t uptime_ms = 0;
  uint64_t pool_bytes = 0;
  uint64_t pool_ready_bytes = 0;
};

using ReplyBody =
    std::variant<HelloReply, RegisterReply, UnregisterReply, StoreReply, RetrieveReply, LookupReply,
                 ReleaseReply, ClearReply, DescribeReply, StatsReply, PingReply>;

proto::Bytes EncodeReply(uint64_t request_id, const ReplyBody& reply);

// ---- The frontend's messages ----
// AttachChannel (docs/protocol.md "Shared-memory channel") is answered by the
// frontend, which owns the channels, not by a handler of the Service.
struct AttachChannelRequest {
  std::string shm_name;  // the segment the client created
  uint64_t request_ring_bytes = 0;
  uint64_t reply_ring_bytes = 0;
};
// The body of a verified envelope whose body type is AttachChannelRequest.
AttachChannelRequest DecodeAttachChannel(const wire::Envelope& envelope);
// doorbell_path: the doorbell's path; empty: none (clients ring over the socket).
proto::Bytes EncodeAttachChannelReply(uint64_t request_id, const std::string& doorbell_path);
// Unprompted messages (request_id 0): kvstashd is stopping, once its copies
// stopped; kvstashd stopped using the client's channel.
proto::Bytes EncodeGoodbye(const std::string& reason);
proto::Bytes EncodeChannelClosed(const std::string& reason);

}  // namespace kvstash::server
