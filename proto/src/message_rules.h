// The second half of verification: after the FlatBuffers Verifier has shown
// that every offset stays inside the message, CheckMessageRules walks the
// message along the schema (kvstash.fbs, embedded as reflection data) and
// enforces what the Verifier does not: unions that name a member carry its
// table, strings are valid UTF-8 without NUL, and the kvstash_* attributes of
// the schema (required, non-empty, maximum string bytes, exact vector
// lengths). One walker for every table, so no handler sees a half-valid one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvstash/proto/kvstash_generated.h"
#include "kvstash/status.h"

namespace kvstash::proto::internal {

// Ok, or InvalidArgument / MalformedMessage naming the field by its path
// ("RegisterKVRequest.allocations[0].handle<HostShmHandle>.name") and the
// limit. `envelope` must have passed the FlatBuffers Verifier.
Status CheckMessageRules(const wire::Envelope& envelope);

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates,
// nothing above U+10FFFF) without NUL; on failure *bad_offset is the offset
// of the first offending byte.
bool IsCleanUtf8(std::string_view text, size_t* bad_offset);

// For tests: the rules the walker read from the schema for one field of one
// table ("RegisterKVRequest", "model"), as text ("max_bytes=256 non_empty"),
// or "" when the table or field has none.
std::string DescribeFieldRules(const std::string& table, const std::string& field);

}  // namespace kvstash::proto::internal
