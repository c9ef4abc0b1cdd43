// Renders any JSON document as text for people, with no knowledge of its
// keys, so the daemon's Describe and Stats documents may grow freely:
//  - scalars of an object: aligned "key  value" lines;
//  - nested objects: sections titled "# path";
//  - arrays of objects: tables (scalar fields, arrays of scalars and one level
//    of nested objects become columns; deeper arrays of objects become their
//    own sections, "# registrations[0].groups").
// Numbers under keys ending in "_bytes" are also shown in KiB/MiB/GiB.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kvstash/bench/human_bytes.h"

namespace kvstash::cli {

// Keys render in the document's order (parse with ordered_json to keep it).
std::string RenderJson(const nlohmann::ordered_json& document);

// "4.0 MiB": the bench reports' format, shared.
using bench::HumanBytes;

}  // namespace kvstash::cli
