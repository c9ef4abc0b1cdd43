// Validation of a layer geometry received from an engine.
#pragma once

#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash {

// Rejects zero counts, payloads wider than their stride, overlapping tokens or
// heads, and extents that overflow 64 bits.
Status ValidateGeometry(const LayerGeometry& g);

}  // namespace kvstash
