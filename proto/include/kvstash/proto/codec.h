// Helpers around the generated wire code: verification, the protocol
// version, and conversions between wire tables and vocab types.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/chunk_layout.h"
#include "kvstash/geometry.h"
#include "kvstash/keys.h"
#include "kvstash/proto/kvstash_generated.h"
#include "kvstash/status.h"

namespace kvstash::proto {

// Bump on any incompatible change to kvstash.fbs; Hello rejects a mismatch.
inline constexpr uint32_t kProtocolVersion = 2;

// Runs the FlatBuffers Verifier (with depth and table limits), then walks the
// message along the schema: every union that names a member carries its
// table, every string is UTF-8 without NUL, and the schema's kvstash_*
// attributes hold (required fields, non-empty vectors, string byte limits,
// exact vector lengths). Returns the envelope, or MalformedMessage /
// InvalidArgument naming the field ("RegisterKVRequest.model: 300 bytes
// exceed the limit of 256") and the limit.
Result<const wire::Envelope*> VerifyEnvelope(const void* data, size_t size, size_t max_bytes);
// The same; *request_id is the envelope's request id whenever the FlatBuffers
// Verifier accepted the message (even if the schema walk then refused it), so
// that the refusal reaches the request that caused it; 0 otherwise.
Result<const wire::Envelope*> VerifyEnvelope(const void* data, size_t size, size_t max_bytes,
                                             uint64_t* request_id);

// The finished bytes of one message.
using Bytes = std::vector<uint8_t>;
Bytes Finish(flatbuffers::FlatBufferBuilder& fbb, uint64_t request_id, wire::Body type,
             flatbuffers::Offset<void> body, uint64_t deadline_ns = 0);
Bytes ErrorMessage(uint64_t request_id, const Status& status);

inline StatusCode FromWire(wire::ErrorCode code) { return StatusCode(uint16_t(code)); }
inline wire::ErrorCode ToWire(StatusCode code) { return wire::ErrorCode(uint16_t(code)); }
inline DType FromWire(wire::DType d) { return DType(uint8_t(d)); }
inline wire::DType ToWire(DType d) { return wire::DType(uint8_t(d)); }

LayerGeometry FromWire(const wire::LayerGeometry& g);
flatbuffers::Offset<wire::LayerGeometry> ToWire(flatbuffers::FlatBufferBuilder& fbb,
                                                const LayerGeometry& g);

inline ChunkKey FromWire(const wire::Key& key) {
  ChunkKey out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = key.bytes()->Get(i);
  return out;
}
inline wire::Key ToWire(const ChunkKey& key) {
  return wire::Key(flatbuffers::span<const uint8_t, 32>(key.data(), 32));
}

}  // namespace kvstash::proto
