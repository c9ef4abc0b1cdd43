// Builds the wire bytes of each request the client sends (one Envelope each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/proto/codec.h"

namespace kvstash::client {

using proto::Bytes;

// Every request's envelope: its id and its deadline (CLOCK_MONOTONIC ns,
// Envelope.deadline_ns), after which kvstashd starts none of its work.
struct Header {
  uint64_t request_id = 0;
  uint64_t deadline_ns = 0;
  // The daemon's id of the registration the request names (0: none): the
  // Encode functions below that take a registration id are given this one.
  uint64_t registration_id = 0;
};

Bytes EncodeHello(const Header& header, const std::string& client_name);
// fence_name: the registration's copy fence (give_up_fence.h); empty: none.
Bytes EncodeRegisterKV(const Header& header, const RegisterOptions& options,
                       const std::string& fence_name = std::string());
Bytes EncodeUnregisterKV(const Header& header, uint64_t registration_id);
Bytes EncodeStore(const Header& header, uint64_t registration_id, const ChunkList& chunks,
                  const BoardSignal* signal = nullptr);
Bytes EncodeRetrieve(const Header& header, uint64_t registration_id, const ChunkList& chunks,
                     uint32_t skip_tokens, uint64_t lease_id, const BoardSignal* signal = nullptr);
Bytes EncodeLookup(const Header& header, uint64_t registration_id,
                   const std::vector<ChunkKey>& keys, uint32_t lease_ms, bool prefetch = false);
Bytes EncodeRelease(const Header& header, uint64_t lease_id);
Bytes EncodeClear(const Header& header, const std::string& model, const std::string& tenant_salt);
Bytes EncodeDescribe(const Header& header);
Bytes EncodeStats(const Header& header);
Bytes EncodePing(const Header& header);
// The session's shared-memory channel (docs/protocol.md "Shared-memory
// channel"): the segment's name and its two rings' sizes.
Bytes EncodeAttachChannel(const Header& header, const std::string& shm_name,
                          uint64_t request_ring_bytes, uint64_t reply_ring_bytes);

// The reply kvstashd would give to UnregisterKV `request_id`, for one that the
// client answers itself (a registration the daemon no longer holds).
Bytes EncodeUnregisterKVReply(uint64_t request_id);

// Writes registration_id into an encoded request that names a registration
// (UnregisterKV, Store, Retrieve, Lookup), in place: the I/O thread's fix-up
// when kvstashd restarted and gave the registration a new id. False for a
// message of another kind.
bool RewriteRegistrationId(Bytes& bytes, uint64_t registration_id);

}  // namespace kvstash::client
