// How a backend prepares the L1 pool's slabs for its copies (touches them,
// and the CUDA backend pins them) and releases them at shutdown. The pool
// runs `prepare` on its preparer threads, in parallel, in the background.
#pragma once

#include <cstdint>
#include <functional>

#include "kvstash/status.h"

namespace kvstash::backends {

struct SlabHooks {
  std::function<Status(uint8_t* data, uint64_t bytes)> prepare;
  std::function<void(uint8_t* data, uint64_t bytes)> release;
};

}  // namespace kvstash::backends
