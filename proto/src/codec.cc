// Verification and conversions for the wire protocol.
#include "kvstash/proto/codec.h"

#include "message_rules.h"

namespace kvstash::proto {

Result<const wire::Envelope*> VerifyEnvelope(const void* data, size_t size, size_t max_bytes) {
  uint64_t ignored = 0;
  return VerifyEnvelope(data, size, max_bytes, &ignored);
}

Result<const wire::Envelope*> VerifyEnvelope(const void* data, size_t size, size_t max_bytes,
                                             uint64_t* request_id) {
  *request_id = 0;
  if (size > max_bytes) {
    return Status::TooLarge("message of " + std::to_string(size) + " bytes exceeds the limit of " +
                            std::to_string(max_bytes) + " bytes");
  }
  if (size < 8) {
    return Status::Malformed("message of " + std::to_string(size) +
                             " bytes is too short to be a kvstash envelope");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (!flatbuffers::BufferHasIdentifier(bytes, wire::EnvelopeIdentifier())) {
    return Status::Malformed("message lacks the kvstash file identifier \"KVS1\"");
  }
  // Depth 16 covers the schema; the table budget bounds verification work.
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/16, /*max_tables=*/1u << 20);
  if (!wire::VerifyEnvelopeBuffer(verifier)) {
    return Status::Malformed("message failed FlatBuffers verification");
  }
  const wire::Envelope* envelope = wire::GetEnvelope(bytes);
  if (envelope->body_type() == wire::Body::NONE || envelope->body() == nullptr) {
    return Status::Malformed("envelope has no body");
  }
  // The structure is sound, so the id is: a refusal from here on can be
  // answered to the request itself.
  *request_id = envelope->request_id();
  KVSTASH_RETURN_IF_ERROR(internal::CheckMessageRules(*envelope));
  return envelope;
}

Bytes Finish(flatbuffers::FlatBufferBuilder& fbb, uint64_t request_id, wire::Body type,
             flatbuffers::Offset<void> body, uint64_t deadline_ns) {
  wire::EnvelopeBuilder envelope(fbb);
  envelope.add_request_id(request_id);
  envelope.add_deadline_ns(deadline_ns);
  envelope.add_body_type(type);
  envelope.add_body(body);
  wire::FinishEnvelopeBuffer(fbb, envelope.Finish());
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Bytes ErrorMessage(uint64_t request_id, const Status& status) {
  flatbuffers::FlatBufferBuilder fbb(256 + status.message().size());
  auto body = wire::CreateErrorReplyDirect(fbb, ToWire(status.code()), status.message().c_str());
  return Finish(fbb, request_id, wire::Body::ErrorReply, body.Union());
}

LayerGeometry FromWire(const wire::LayerGeometry& g) {
  LayerGeometry out;
  out.num_blocks = g.num_blocks();
  out.kv_count = g.kv_count();
  out.block_tokens = g.block_tokens();
  out.num_heads = g.num_heads();
  out.head_bytes = g.head_bytes();
  out.block_stride = g.block_stride();
  out.kv_stride = g.kv_stride();
  out.token_stride = g.token_stride();
  out.head_stride = g.head_stride();
  out.dtype = FromWire(g.dtype());
  return out;
}

flatbuffers::Offset<wire::LayerGeometry> ToWire(flatbuffers::FlatBufferBuilder& fbb,
                                                const LayerGeometry& g) {
  return wire::CreateLayerGeometry(fbb, g.num_blocks, g.kv_count, g.block_tokens, g.num_heads,
                                   g.head_bytes, g.block_stride, g.kv_stride, g.token_stride,
                                   g.head_stride, ToWire(g.dtype));
}

}  // namespace kvstash::proto
