// Reply decoding: verified FlatBuffers envelopes to client values.
#include "decode.h"

#include <algorithm>

namespace kvstash::client {

namespace {

// ChunkResult and wire::ChunkResult are both generated from the schema.
static_assert(kChunkResultCount == size_t(wire::ChunkResult::MAX) + 1);

// The body as T, or MalformedMessage naming what came instead.
template <typename T>
Result<const T*> BodyAs(const wire::Envelope& envelope) {
  if (const T* body = envelope.body_as<T>()) return body;
  return Status::Malformed(
      std::string("expected a ") + wire::EnumNameBody(wire::BodyTraits<T>::enum_value) +
      " but kvstashd answered with a " + wire::EnumNameBody(envelope.body_type()));
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

template <size_t N>
Status CopyBytes(const flatbuffers::Vector<uint8_t>* bytes, const char* field,
                 std::array<uint8_t, N>& out) {
  if (bytes == nullptr || bytes->size() != N) {
    return Status::Malformed(std::string(field) + " has " +
                             std::to_string(bytes ? bytes->size() : 0) + " bytes, expected " +
                             std::to_string(N));
  }
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return Status::Ok();
}

Result<std::vector<ChunkOutcome>> DecodeOutcomes(
    const flatbuffers::Vector<flatbuffers::Offset<wire::ChunkOutcome>>* chunks, size_t num_chunks) {
  const size_t got = chunks ? chunks->size() : 0;
  if (got != num_chunks) {
    return Status::Malformed("reply carries " + std::to_string(got) + " chunk outcomes for " +
                             std::to_string(num_chunks) + " chunks requested");
  }
  std::vector<ChunkOutcome> out;
  out.reserve(got);
  for (size_t i = 0; i < got; ++i) {
    const wire::ChunkOutcome* chunk = chunks->Get(flatbuffers::uoffset_t(i));
    if (uint8_t(chunk->result()) > uint8_t(wire::ChunkResult::MAX)) {
      return Status::Malformed("chunk " + std::to_string(i) + " has unknown result " +
                               std::to_string(unsigned(chunk->result())));
    }
    ChunkOutcome outcome;
    outcome.result = ChunkResult(uint8_t(chunk->result()));
    outcome.num_tokens = chunk->num_tokens();
    if (outcome.result == ChunkResult::kFailed) {
      StatusCode code = proto::FromWire(chunk->error());
      if (code == StatusCode::kOk) code = StatusCode::kInternal;  // Failed must carry an error
      outcome.error = Status(code, Str(chunk->message()));
    }
    out.push_back(std::move(outcome));
  }
  return out;
}

Result<ChunkGroup> DecodeGroup(const wire::GroupInfo& info, uint32_t chunk_tokens, size_t index) {
  const std::string where = "group " + std::to_string(index);
  if (info.geometry() == nullptr || info.layers() == nullptr || info.layers()->size() == 0) {
    return Status::Malformed(where + " lacks its geometry or layers");
  }
  ChunkGroup group;
  group.geometry = proto::FromWire(*info.geometry());
  group.layers.assign(info.layers()->begin(), info.layers()->end());
  group.offset_bytes = info.offset_bytes();
  const LayerGeometry& g = group.geometry;
  group.shape = FlatGroupShape{uint32_t(group.layers.size()), g.kv_count, chunk_tokens, g.num_heads,
                               g.head_bytes};
  if (group.size_bytes() != info.size_bytes()) {
    return Status::Malformed(where + " is " + std::to_string(info.size_bytes()) +
                             " bytes but its shape makes " + std::to_string(group.size_bytes()));
  }
  return group;
}

}  // namespace

Result<ServerInfo> DecodeHello(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::HelloReply>(envelope);
  if (!reply.ok()) return reply.status();
  const wire::HelloReply& r = **reply;
  ServerInfo info;
  info.protocol_version = r.protocol_version();
  info.server_version = Str(r.server_version());
  KVSTASH_RETURN_IF_ERROR(CopyBytes(r.boot_id(), "HelloReply.boot_id", info.boot_id));
  info.chunk_tokens = r.chunk_tokens();
  info.max_chunks_per_request = r.max_chunks_per_request();
  info.max_message_bytes = r.max_message_bytes();
  info.backend = Str(r.backend());
  info.peer_timeout_ms = r.peer_timeout_ms();
  info.pid = r.pid();
  return info;
}

Result<RegisteredKv> DecodeRegisterKV(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::RegisterKVReply>(envelope);
  if (!reply.ok()) return reply.status();
  const wire::RegisterKVReply& r = **reply;
  RegisteredKv out;
  out.id = r.registration_id();
  out.chunk_tokens = r.chunk_tokens();
  out.chunk_bytes = r.chunk_bytes();
  out.block_tokens = r.block_tokens();
  if (out.id == 0) return Status::Malformed("RegisterKVReply has registration id 0");
  if (out.block_tokens == 0 || out.chunk_tokens % out.block_tokens != 0) {
    return Status::Malformed(
        "RegisterKVReply has chunk_tokens " + std::to_string(out.chunk_tokens) +
        ", not a multiple of block_tokens " + std::to_string(out.block_tokens));
  }
  KVSTASH_RETURN_IF_ERROR(CopyBytes(r.layout_fingerprint(), "RegisterKVReply.layout_fingerprint",
                                    out.layout_fingerprint));
  KVSTASH_RETURN_IF_ERROR(
      CopyBytes(r.namespace_id(), "RegisterKVReply.namespace_id", out.namespace_id));
  if (r.groups() == nullptr || r.groups()->size() == 0) {
    return Status::Malformed("RegisterKVReply has no groups");
  }
  for (flatbuffers::uoffset_t i = 0; i < r.groups()->size(); ++i) {
    auto group = DecodeGroup(*r.groups()->Get(i), out.chunk_tokens, i);
    if (!group.ok()) return group.status();
    out.groups.push_back(std::move(group.value()));
  }
  return out;
}

bool DecodeFenced(const wire::Envelope& envelope) {
  const wire::RegisterKVReply* reply = envelope.body_as_RegisterKVReply();
  return reply != nullptr && reply->fenced();
}

Status DecodeUnregisterKV(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::UnregisterKVReply>(envelope);
  return reply.ok() ? Status::Ok() : reply.status();
}

Result<std::vector<ChunkOutcome>> DecodeStore(const wire::Envelope& envelope, size_t num_chunks) {
  auto reply = BodyAs<wire::StoreReply>(envelope);
  if (!reply.ok()) return reply.status();
  return DecodeOutcomes((*reply)->chunks(), num_chunks);
}

Result<std::vector<ChunkOutcome>> DecodeRetrieve(const wire::Envelope& envelope,
                                                 size_t num_chunks) {
  auto reply = BodyAs<wire::RetrieveReply>(envelope);
  if (!reply.ok()) return reply.status();
  return DecodeOutcomes((*reply)->chunks(), num_chunks);
}

Result<LookupResult> DecodeLookup(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::LookupReply>(envelope);
  if (!reply.ok()) return reply.status();
  const wire::LookupReply& r = **reply;
  LookupResult out{r.hit_chunks(),      r.hit_tokens(), r.lease_id(), r.lease_expires_ms(), {},
                   r.prefetch_pending()};
  out.lease_truncated = r.lease_truncated();
  if (r.hit_tiers() != nullptr) {
    for (auto level : *r.hit_tiers()) {
      const uint8_t value = uint8_t(level);
      out.hit_tiers.push_back(value <= 3 ? TierLevel(value) : TierLevel::kNone);
    }
  }
  return out;
}

Result<uint32_t> DecodeRelease(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::ReleaseReply>(envelope);
  if (!reply.ok()) return reply.status();
  return (*reply)->released_chunks();
}

Result<uint64_t> DecodeClear(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::ClearReply>(envelope);
  if (!reply.ok()) return reply.status();
  return (*reply)->cleared_chunks();
}

Result<std::string> DecodeDescribe(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::DescribeReply>(envelope);
  if (!reply.ok()) return reply.status();
  return Str((*reply)->json());
}

Result<StatsResult> DecodeStats(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::StatsReply>(envelope);
  if (!reply.ok()) return reply.status();
  StatsResult out;
  if (const auto* counters = (*reply)->counters()) {
    for (const wire::Counter* counter : *counters) {
      out.counters.emplace_back(Str(counter->name()), counter->value());
    }
  }
  out.json = Str((*reply)->json());
  return out;
}

Result<uint64_t> DecodePing(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::PingReply>(envelope);
  if (!reply.ok()) return reply.status();
  return (*reply)->uptime_ms();
}

Result<std::string> DecodeAttachChannel(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::AttachChannelReply>(envelope);
  if (!reply.ok()) return reply.status();
  return Str((*reply)->doorbell());
}

std::optional<std::string> DecodeGoodbye(const wire::Envelope& envelope) {
  const wire::Goodbye* goodbye = envelope.body_as_Goodbye();
  if (goodbye == nullptr) return std::nullopt;
  return Str(goodbye->reason());
}

std::optional<std::string> DecodeChannelClosed(const wire::Envelope& envelope) {
  const wire::ChannelClosed* closed = envelope.body_as_ChannelClosed();
  if (closed == nullptr) return std::nullopt;
  return Str(closed->reason());
}

Result<PoolReadiness> DecodePoolReadiness(const wire::Envelope& envelope) {
  auto reply = BodyAs<wire::PingReply>(envelope);
  if (!reply.ok()) return reply.status();
  return PoolReadiness{(*reply)->pool_ready_bytes(), (*reply)->pool_bytes()};
}

uint64_t PeekRequestId(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (size < 8 || !flatbuffers::BufferHasIdentifier(bytes, wire::EnvelopeIdentifier())) return 0;
  flatbuffers::Verifier verifier(bytes, size);
  const flatbuffers::uoffset_t root = verifier.VerifyOffset(0);
  if (root == 0) return 0;
  // Envelope hides its Table base; read the one field through Table itself.
  const auto* table = reinterpret_cast<const flatbuffers::Table*>(bytes + root);
  if (!table->VerifyTableStart(verifier) ||
      !table->VerifyField<uint64_t>(verifier, wire::Envelope::VT_REQUEST_ID, 8)) {
    return 0;
  }
  return table->GetField<uint64_t>(wire::Envelope::VT_REQUEST_ID, 0);
}

}  // namespace kvstash::client

namespace kvstash {

uint32_t LookupResult::CountIn(TierLevel level) const {
  uint32_t n = 0;
  for (TierLevel t : hit_tiers) n += t == level ? 1 : 0;
  return n;
}

}  // namespace kvstash
