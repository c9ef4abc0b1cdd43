// A raw ZeroMQ round trip, the floor under any kvstash request: a DEALER
// sends one frame over ipc:// to a ROUTER in a thread of this process that
// sends it straight back. No FlatBuffers, no daemon.
#pragma once

#include <cstddef>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::bench {

// Microseconds of `count` round trips of a `message_bytes` frame (after a
// warm-up), in order.
Result<std::vector<double>> ZmqRoundTripsUs(size_t message_bytes, int count);

}  // namespace kvstash::bench
