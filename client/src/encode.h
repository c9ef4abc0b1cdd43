// Builds the wire bytes of each request the client sends (one Envelope each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/proto/codec.h"

namespace kvstash::client {

using proto::Bytes;

Bytes EncodeHello(uint64_t request_id, const std::string& client_name);
Bytes EncodeRegisterKV(uint64_t request_id, const RegisterOptions& options);
Bytes EncodeUnregisterKV(uint64_t request_id, uint64_t registration_id);
Bytes EncodeStore(uint64_t request_id, uint64_t registration_id,
                  const std::vector<ChunkBlocks>& chunks);
Bytes EncodeRetrieve(uint64_t request_id, uint64_t registration_id,
                     const std::vector<ChunkBlocks>& chunks, uint32_t skip_tokens,
                     uint64_t lease_id);
Bytes EncodeLookup(uint64_t request_id, uint64_t registration_id,
                   const std::vector<ChunkKey>& keys, uint32_t lease_ms);
Bytes EncodeRelease(uint64_t request_id, uint64_t lease_id);
Bytes EncodeClear(uint64_t request_id, const std::string& model, const std::string& tenant_salt);
Bytes EncodeDescribe(uint64_t request_id);
Bytes EncodeStats(uint64_t request_id);
Bytes EncodePing(uint64_t request_id);

}  // namespace kvstash::client
