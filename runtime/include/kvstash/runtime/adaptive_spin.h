// When a thread that serves requests may poll on its core instead of
// sleeping: for a window after its last activity, and while work it waits
// for is in flight, for up to kInFlightWindows windows after it. Past that
// it sleeps, so an idle process uses no CPU; a zero window never spins.
// kvstashd's frontend and copy lanes and libkvstash's I/O thread use it
// (docs/deployment.md "Spinning" says why and what it costs).
// One owner thread.
#pragma once

#include <chrono>

namespace kvstash {

// The default window (--busy-poll-us, ClientOptions::busy_poll_us), in us.
inline constexpr unsigned kDefaultSpinWindowUs = 50;

class AdaptiveSpin {
 public:
  using Clock = std::chrono::steady_clock;
  // A copy of 1 ms (32 MiB over PCIe) is covered by the default window; a
  // longer one pays one wake-up, which is small beside it.
  static constexpr int kInFlightWindows = 20;

  explicit AdaptiveSpin(std::chrono::microseconds window) : window_(window) {}

  void Activity(Clock::time_point now) { last_activity_ = now; }
  bool Spinning(Clock::time_point now, bool in_flight) const {
    if (window_.count() <= 0) return false;
    return now - last_activity_ < (in_flight ? window_ * kInFlightWindows : window_);
  }
  std::chrono::microseconds window() const { return window_; }

 private:
  const std::chrono::microseconds window_;
  Clock::time_point last_activity_{};
};

}  // namespace kvstash
