// Decoding requests into plain structs and encoding plain replies.
#include "wire_codec.h"

#include <cstring>

#include "kvstash/version.h"

namespace kvstash::server {

static_assert(FLATBUFFERS_LITTLEENDIAN, "block ids are read in place from little-endian messages");
static_assert(uint8_t(ChunkResult::kStored) == uint8_t(wire::ChunkResult::Stored) &&
              uint8_t(ChunkResult::kFailed) == uint8_t(wire::ChunkResult::Failed) &&
              uint8_t(ChunkResult::kMissing) == uint8_t(wire::ChunkResult::Missing));

namespace {

using ChunkList = flatbuffers::Vector<flatbuffers::Offset<wire::ChunkBlocks>>;

// Optional text. Its size and encoding were checked with the message
// (kvstash_max_bytes in kvstash.fbs, proto/src/message_rules.cc).
std::string Text(const flatbuffers::String* value) { return value ? value->str() : std::string(); }

Result<AllocationSpec> DecodeAllocation(const wire::Allocation* allocation, size_t index) {
  const std::string where = "allocation " + std::to_string(index);
  if (allocation == nullptr) return Status::InvalidArgument(where + " is missing");
  AllocationSpec spec;
  switch (allocation->handle_type()) {
    case wire::MemoryHandle::HostShmHandle: {
      const wire::HostShmHandle* shm = allocation->handle_as_HostShmHandle();
      if (shm == nullptr)
        return Status::InvalidArgument(where + " names a host shm handle but carries none");
      if (shm->name() == nullptr) return Status::InvalidArgument(where + " has no shm name");
      spec.kind = AllocationSpec::Kind::kHostShm;
      spec.shm_name = shm->name()->str();
      spec.size_bytes = shm->size_bytes();
      break;
    }
    case wire::MemoryHandle::CudaIpcHandle: {
      const wire::CudaIpcHandle* ipc = allocation->handle_as_CudaIpcHandle();
      if (ipc == nullptr)
        return Status::InvalidArgument(where + " names a CUDA IPC handle but carries none");
      if (ipc->ipc_handle() == nullptr || ipc->ipc_handle()->size() != 64) {
        return Status::InvalidArgument(where + ": a CUDA IPC handle has 64 bytes");
      }
      if (ipc->gpu_uuid() == nullptr || ipc->gpu_uuid()->size() != 16) {
        return Status::InvalidArgument(where + ": a GPU UUID has 16 bytes");
      }
      spec.kind = AllocationSpec::Kind::kCudaIpc;
      spec.ipc_handle.assign(ipc->ipc_handle()->begin(), ipc->ipc_handle()->end());
      std::copy(ipc->gpu_uuid()->begin(), ipc->gpu_uuid()->end(), spec.gpu_uuid.begin());
      spec.size_bytes = ipc->size_bytes();
      break;
    }
    case wire::MemoryHandle::PeerFdHandle: {
      const wire::PeerFdHandle* peer_fd = allocation->handle_as_PeerFdHandle();
      if (peer_fd == nullptr)
        return Status::InvalidArgument(where + " names a peer descriptor but carries none");
      if (peer_fd->fd() < 0) {
        return Status::InvalidArgument(where + " names descriptor " +
                                       std::to_string(peer_fd->fd()) + "; descriptors are >= 0");
      }
      spec.kind = AllocationSpec::Kind::kPeerFd;
      spec.peer_fd = peer_fd->fd();
      spec.size_bytes = peer_fd->size_bytes();
      break;
    }
    default: return Status::InvalidArgument(where + " has no memory handle");
  }
  if (spec.size_bytes == 0) return Status::InvalidArgument(where + " declares 0 bytes");
  return spec;
}

std::optional<BoardSignal> DecodeSignal(const wire::BoardSignal* m) {
  if (m == nullptr) return std::nullopt;
  return BoardSignal{m->slot(), m->count(), m->sequence()};
}

Result<RequestBody> DecodeRegister(const wire::RegisterKVRequest& m) {
  RegisterRequest out;
  RegistrationRequest& r = out.registration;
  r.model = Text(m.model());
  r.tenant_salt = Text(m.tenant_salt());
  r.tp_rank = m.tp_rank();
  r.tp_size = m.tp_size();
  r.replicated_across_ranks = m.replicated_across_ranks();
  if (r.model.empty()) return Status::InvalidArgument("RegisterKV needs a model name");
  if (m.allocations() == nullptr || m.layers() == nullptr || m.layers()->size() == 0) {
    return Status::InvalidArgument("RegisterKV needs allocations and at least one layer");
  }
  if (m.layers()->size() > kMaxLayers || m.allocations()->size() > kMaxLayers) {
    return Status::TooLarge("RegisterKV names " + std::to_string(m.layers()->size()) +
                            " layers and " + std::to_string(m.allocations()->size()) +
                            " allocations; the limit is " + std::to_string(kMaxLayers));
  }
  for (size_t i = 0; i < m.allocations()->size(); ++i) {
    Result<AllocationSpec> spec = DecodeAllocation(m.allocations()->Get(i), i);
    if (!spec.ok()) return spec.status();
    r.allocations.push_back(std::move(*spec));
  }
  for (size_t i = 0; i < m.layers()->size(); ++i) {
    const wire::LayerDesc* layer = m.layers()->Get(i);
    if (layer == nullptr || layer->geometry() == nullptr) {
      return Status::InvalidArgument("layer " + std::to_string(i) + " has no geometry");
    }
    r.layers.push_back(
        LayerSpec{layer->allocation(), layer->offset_bytes(), proto::FromWire(*layer->geometry())});
  }
  if (const wire::HostShmHandle* board = m.board()) {
    r.board = BoardSpec{Text(board->name()), board->size_bytes()};
  }
  r.fence_name = Text(m.fence());
  return RequestBody(std::move(out));
}

// The chunks of a Store or Retrieve into `out`. Block ids stay in the
// message (little-endian uint32, as in memory here) unless the message sits
// at an address that leaves them misaligned; then `out` owns a copy.
Status DecodeChunks(const ChunkList* chunks, const DecodeLimits& limits, CopyRequest* out) {
  if (chunks == nullptr || chunks->size() == 0) {
    return Status::InvalidArgument("the request names no chunks");
  }
  if (chunks->size() > limits.max_chunks_per_request) {
    return Status::TooLarge("the request names " + std::to_string(chunks->size()) +
                            " chunks; the limit is " +
                            std::to_string(limits.max_chunks_per_request));
  }
  out->chunks.reserve(chunks->size());
  bool aligned = true;
  for (size_t i = 0; i < chunks->size(); ++i) {
    const wire::ChunkBlocks* chunk = chunks->Get(i);
    if (chunk == nullptr || chunk->key() == nullptr || chunk->key()->bytes() == nullptr) {
      return Status::InvalidArgument("chunk " + std::to_string(i) + " has no key");
    }
    if (chunk->block_ids() == nullptr) {
      return Status::InvalidArgument("chunk " + std::to_string(i) + " names no blocks");
    }
    const auto* ids = chunk->block_ids();
    out->chunks.push_back(ChunkRequest{proto::FromWire(*chunk->key()), chunk->num_tokens(),
                                       BlockIdView(ids->data(), ids->size())});
    if (reinterpret_cast<uintptr_t>(ids->data()) % alignof(uint32_t) != 0) aligned = false;
  }
  if (!aligned) out->OwnBlockIds();
  return Status::Ok();
}

template <typename T>
Result<const T*> BodyOf(const wire::Envelope& e) {
  const T* body = e.body_as<T>();
  if (body == nullptr) {
    return Status::InvalidArgument(std::string("the envelope names a ") +
                                   wire::EnumNameBody(e.body_type()) + " but carries no body");
  }
  return body;
}

}  // namespace

void CopyRequest::OwnBlockIds() {
  size_t total = 0;
  for (const ChunkRequest& chunk : chunks) total += chunk.block_ids.size();
  std::vector<uint32_t> ids(total);
  size_t at = 0;
  for (ChunkRequest& chunk : chunks) {
    const size_t n = chunk.block_ids.size();
    // memcpy: a misaligned message is read bytewise.
    if (n > 0) std::memcpy(ids.data() + at, chunk.block_ids.data(), n * sizeof(uint32_t));
    chunk.block_ids = BlockIdView(ids.data() + at, n);
    at += n;
  }
  owned_block_ids = std::move(ids);  // the buffer moves with the vector: the views stay valid
}

RequestKind KindOf(const RequestBody& body) {
  static constexpr RequestKind kKinds[] = {
      RequestKind::kHello,   RequestKind::kRegisterKV, RequestKind::kUnregisterKV,
      RequestKind::kStore,   RequestKind::kRetrieve,   RequestKind::kLookup,
      RequestKind::kRelease, RequestKind::kClear,      RequestKind::kDescribe,
      RequestKind::kStats,   RequestKind::kPing};
  return kKinds[body.index()];
}

Result<RequestBody> DecodeRequest(const wire::Envelope& e, const DecodeLimits& limits) {
  using wire::Body;
  switch (e.body_type()) {
    case Body::HelloRequest: {
      auto m = BodyOf<wire::HelloRequest>(e);
      if (!m.ok()) return m.status();
      return RequestBody(HelloRequest{(*m)->protocol_version()});
    }
    case Body::RegisterKVRequest: {
      auto m = BodyOf<wire::RegisterKVRequest>(e);
      if (!m.ok()) return m.status();
      return DecodeRegister(**m);
    }
    case Body::UnregisterKVRequest: {
      auto m = BodyOf<wire::UnregisterKVRequest>(e);
      if (!m.ok()) return m.status();
      return RequestBody(UnregisterRequest{(*m)->registration_id()});
    }
    case Body::StoreRequest: {
      auto m = BodyOf<wire::StoreRequest>(e);
      if (!m.ok()) return m.status();
      StoreRequest out;
      out.registration_id = (*m)->registration_id();
      out.signal = DecodeSignal((*m)->signal());
      KVSTASH_RETURN_IF_ERROR(DecodeChunks((*m)->chunks(), limits, &out));
      return RequestBody(std::move(out));
    }
    case Body::RetrieveRequest: {
      auto m = BodyOf<wire::RetrieveRequest>(e);
      if (!m.ok()) return m.status();
      RetrieveRequest out;
      out.registration_id = (*m)->registration_id();
      out.signal = DecodeSignal((*m)->signal());
      out.skip_tokens = (*m)->skip_tokens();
      out.lease_id = (*m)->lease_id();
      KVSTASH_RETURN_IF_ERROR(DecodeChunks((*m)->chunks(), limits, &out));
      return RequestBody(std::move(out));
    }
    case Body::LookupRequest: {
      auto m = BodyOf<wire::LookupRequest>(e);
      if (!m.ok()) return m.status();
      if ((*m)->keys() == nullptr) return Status::InvalidArgument("Lookup names no keys");
      if ((*m)->keys()->size() > limits.max_chunks_per_request) {
        return Status::TooLarge("Lookup names " + std::to_string((*m)->keys()->size()) +
                                " keys; the limit is " +
                                std::to_string(limits.max_chunks_per_request));
      }
      LookupRequest out{(*m)->registration_id(), {}, (*m)->lease_ms(), (*m)->prefetch()};
      out.keys.reserve((*m)->keys()->size());
      for (const wire::Key* key : *(*m)->keys()) out.keys.push_back(proto::FromWire(*key));
      return RequestBody(std::move(out));
    }
    case Body::ReleaseRequest: {
      auto m = BodyOf<wire::ReleaseRequest>(e);
      if (!m.ok()) return m.status();
      return RequestBody(ReleaseRequest{(*m)->lease_id()});
    }
    case Body::ClearRequest: {
      auto m = BodyOf<wire::ClearRequest>(e);
      if (!m.ok()) return m.status();
      ClearRequest out;
      out.model = Text((*m)->model());
      out.tenant_salt = Text((*m)->tenant_salt());
      return RequestBody(std::move(out));
    }
    case Body::DescribeRequest: return RequestBody(DescribeRequest{});
    case Body::StatsRequest: return RequestBody(StatsRequest{});
    case Body::PingRequest: return RequestBody(PingRequest{});
    default:
      return Status::InvalidArgument(std::string("\"") + wire::EnumNameBody(e.body_type()) +
                                     "\" is not a request");
  }
}

namespace {

using flatbuffers::FlatBufferBuilder;

proto::Bytes Outcomes(FlatBufferBuilder& fbb, uint64_t request_id, wire::Body type,
                      const std::vector<ChunkOutcome>& outcomes) {
  std::vector<flatbuffers::Offset<wire::ChunkOutcome>> offsets;
  offsets.reserve(outcomes.size());
  for (const ChunkOutcome& o : outcomes) {
    auto message = o.error.ok() ? 0 : fbb.CreateString(o.error.message()).o;
    offsets.push_back(wire::CreateChunkOutcome(fbb, wire::ChunkResult(uint8_t(o.result)),
                                               o.num_tokens, proto::ToWire(o.error.code()),
                                               flatbuffers::Offset<flatbuffers::String>(message)));
  }
  auto chunks = fbb.CreateVector(offsets);
  flatbuffers::Offset<void> body = type == wire::Body::StoreReply
                                       ? wire::CreateStoreReply(fbb, chunks).Union()
                                       : wire::CreateRetrieveReply(fbb, chunks).Union();
  return proto::Finish(fbb, request_id, type, body);
}

struct Encoder {
  uint64_t id;
  proto::Bytes operator()(const HelloReply& r) const {
    FlatBufferBuilder b(256);
    auto version = b.CreateString(r.server_version);
    auto boot = b.CreateVector(r.boot_id.data(), r.boot_id.size());
    auto backend = b.CreateString(r.backend);
    wire::HelloReplyBuilder reply(b);
    reply.add_protocol_version(proto::kProtocolVersion);
    reply.add_server_version(version);
    reply.add_boot_id(boot);
    reply.add_chunk_tokens(r.chunk_tokens);
    reply.add_max_chunks_per_request(r.max_chunks_per_request);
    reply.add_max_message_bytes(r.max_message_bytes);
    reply.add_backend(backend);
    reply.add_peer_timeout_ms(r.peer_timeout_ms);
    reply.add_pid(r.pid);
    auto offset = reply.Finish();
    return proto::Finish(b, id, wire::Body::HelloReply, offset.Union());
  }
  proto::Bytes operator()(const RegisterReply& r) const {
    const Registration& reg = *r.registration;
    FlatBufferBuilder fbb(1024);
    std::vector<flatbuffers::Offset<wire::GroupInfo>> groups;
    for (const ChunkGroup& group : reg.layout.groups()) {
      auto geometry = proto::ToWire(fbb, group.geometry);
      auto layers = fbb.CreateVector(group.layers);
      groups.push_back(
          wire::CreateGroupInfo(fbb, geometry, layers, group.offset_bytes, group.size_bytes()));
    }
    auto groups_offset = fbb.CreateVector(groups);
    auto fingerprint =
        fbb.CreateVector(reg.layout.fingerprint().data(), reg.layout.fingerprint().size());
    auto namespace_id = fbb.CreateVector(reg.namespace_id.data(), reg.namespace_id.size());
    auto body = wire::CreateRegisterKVReply(
        fbb, reg.id, reg.layout.chunk_tokens(), reg.layout.chunk_bytes(), reg.layout.block_tokens(),
        groups_offset, fingerprint, namespace_id, reg.fence != nullptr);
    return proto::Finish(fbb, id, wire::Body::RegisterKVReply, body.Union());
  }
  proto::Bytes operator()(const UnregisterReply&) const {
    FlatBufferBuilder fbb(64);
    return proto::Finish(fbb, id, wire::Body::UnregisterKVReply,
                         wire::CreateUnregisterKVReply(fbb).Union());
  }
  proto::Bytes operator()(const StoreReply& r) const {
    FlatBufferBuilder fbb(64 + 32 * r.chunks.size());
    return Outcomes(fbb, id, wire::Body::StoreReply, r.chunks);
  }
  proto::Bytes operator()(const RetrieveReply& r) const {
    FlatBufferBuilder fbb(64 + 32 * r.chunks.size());
    return Outcomes(fbb, id, wire::Body::RetrieveReply, r.chunks);
  }
  proto::Bytes operator()(const LookupReply& r) const {
    FlatBufferBuilder fbb(64 + r.hit_tiers.size());
    auto tiers = fbb.CreateVector(reinterpret_cast<const wire::TierLevel*>(r.hit_tiers.data()),
                                  r.hit_tiers.size());
    auto body =
        wire::CreateLookupReply(fbb, r.hit_chunks, r.hit_tokens, r.lease_id, r.lease_expires_ms,
                                tiers, r.prefetch_pending, r.lease_truncated);
    return proto::Finish(fbb, id, wire::Body::LookupReply, body.Union());
  }
  proto::Bytes operator()(const ReleaseReply& r) const {
    FlatBufferBuilder fbb(64);
    auto body = wire::CreateReleaseReply(fbb, r.released_chunks);
    return proto::Finish(fbb, id, wire::Body::ReleaseReply, body.Union());
  }
  proto::Bytes operator()(const ClearReply& r) const {
    FlatBufferBuilder fbb(64);
    auto body = wire::CreateClearReply(fbb, r.cleared_chunks);
    return proto::Finish(fbb, id, wire::Body::ClearReply, body.Union());
  }
  proto::Bytes operator()(const DescribeReply& r) const {
    FlatBufferBuilder fbb(r.json.size() + 256);
    auto body = wire::CreateDescribeReplyDirect(fbb, r.json.c_str());
    return proto::Finish(fbb, id, wire::Body::DescribeReply, body.Union());
  }
  proto::Bytes operator()(const StatsReply& r) const {
    FlatBufferBuilder fbb(r.json.size() + 4096);
    std::vector<flatbuffers::Offset<wire::Counter>> counters;
    for (const Stats::Counter& c : r.counters)
      counters.push_back(wire::CreateCounterDirect(fbb, c.name, c.value));
    auto body = wire::CreateStatsReplyDirect(fbb, &counters, r.json.c_str());
    return proto::Finish(fbb, id, wire::Body::StatsReply, body.Union());
  }
  proto::Bytes operator()(const PingReply& r) const {
    FlatBufferBuilder fbb(64);
    auto body = wire::CreatePingReply(fbb, r.uptime_ms, r.pool_bytes, r.pool_ready_bytes);
    return proto::Finish(fbb, id, wire::Body::PingReply, body.Union());
  }
};

}  // namespace

proto::Bytes EncodeReply(uint64_t request_id, const ReplyBody& reply) {
  return std::visit(Encoder{request_id}, reply);
}

AttachChannelRequest DecodeAttachChannel(const wire::Envelope& envelope) {
  AttachChannelRequest out;
  if (const wire::AttachChannelRequest* m = envelope.body_as_AttachChannelRequest()) {
    out.shm_name = Text(m->shm_name());
    out.request_ring_bytes = m->request_ring_bytes();
    out.reply_ring_bytes = m->reply_ring_bytes();
  }
  return out;
}

proto::Bytes EncodeAttachChannelReply(uint64_t request_id, const std::string& doorbell_path) {
  FlatBufferBuilder fbb(128 + doorbell_path.size());
  auto body = wire::CreateAttachChannelReplyDirect(
      fbb, doorbell_path.empty() ? nullptr : doorbell_path.c_str());
  return proto::Finish(fbb, request_id, wire::Body::AttachChannelReply, body.Union());
}

proto::Bytes EncodeGoodbye(const std::string& reason) {
  FlatBufferBuilder fbb(64 + reason.size());
  auto body = wire::CreateGoodbyeDirect(fbb, reason.c_str());
  return proto::Finish(fbb, 0, wire::Body::Goodbye, body.Union());
}

proto::Bytes EncodeChannelClosed(const std::string& reason) {
  FlatBufferBuilder fbb(64 + reason.size());
  auto body = wire::CreateChannelClosedDirect(fbb, reason.c_str());
  return proto::Finish(fbb, 0, wire::Body::ChannelClosed, body.Union());
}

}  // namespace kvstash::server
