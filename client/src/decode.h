// Reads verified reply envelopes into client values. Each reader checks that
// the body is the reply it expects and that its fields are usable (sizes of
// ids and keys, one outcome per chunk), failing with MalformedMessage.
// ErrorReply bodies never get here: the transport turns them into Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/proto/codec.h"

namespace kvstash::client {

Result<ServerInfo> DecodeHello(const wire::Envelope& envelope);
Result<RegisteredKv> DecodeRegisterKV(const wire::Envelope& envelope);
// Whether the daemon holds the registration's copy fence (give_up_fence.h).
bool DecodeFenced(const wire::Envelope& envelope);
Status DecodeUnregisterKV(const wire::Envelope& envelope);
Result<std::vector<ChunkOutcome>> DecodeStore(const wire::Envelope& envelope, size_t num_chunks);
Result<std::vector<ChunkOutcome>> DecodeRetrieve(const wire::Envelope& envelope, size_t num_chunks);
Result<LookupResult> DecodeLookup(const wire::Envelope& envelope);
Result<uint32_t> DecodeRelease(const wire::Envelope& envelope);
Result<uint64_t> DecodeClear(const wire::Envelope& envelope);
Result<std::string> DecodeDescribe(const wire::Envelope& envelope);
Result<StatsResult> DecodeStats(const wire::Envelope& envelope);
Result<uint64_t> DecodePing(const wire::Envelope& envelope);
Result<PoolReadiness> DecodePoolReadiness(const wire::Envelope& envelope);
// AttachChannelReply: the daemon's doorbell path ("" when it has none).
Result<std::string> DecodeAttachChannel(const wire::Envelope& envelope);

// Messages kvstashd sends unprompted (request_id 0): the reason it gives,
// or nullopt when the envelope is another message.
// Goodbye: kvstashd is stopping, once its copies stopped.
std::optional<std::string> DecodeGoodbye(const wire::Envelope& envelope);
// ChannelClosed: kvstashd stopped using this client's shared-memory channel.
std::optional<std::string> DecodeChannelClosed(const wire::Envelope& envelope);

// The request id of a message that failed verification, when at least the
// envelope's own table and its request_id field are readable; 0 otherwise.
uint64_t PeekRequestId(const void* data, size_t size);

}  // namespace kvstash::client
