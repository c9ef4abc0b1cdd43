// The one place where a runtime access width becomes a template parameter:
// kernels are templates on kWidth, never copied per width.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "kvstash/status.h"

namespace kvstash::kernels::internal {

// Calls fn(std::integral_constant<int, width>{}) for width 16, 8, 4, 2 or 1.
template <typename Fn>
Status DispatchAccessWidth(uint32_t width_bytes, Fn&& fn) {
  switch (width_bytes) {
    case 16: return fn(std::integral_constant<int, 16>{});
    case 8: return fn(std::integral_constant<int, 8>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    case 2: return fn(std::integral_constant<int, 2>{});
    case 1: return fn(std::integral_constant<int, 1>{});
    default:
      return Status::Internal("unsupported access width " + std::to_string(width_bytes) +
                              " bytes: expected 16, 8, 4, 2 or 1");
  }
}

}  // namespace kvstash::kernels::internal
