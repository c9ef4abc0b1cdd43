// Waits for a condition that another process or thread makes true later
// (a daemon noticing a dead peer, write-behind finishing).
#pragma once

#include <chrono>
#include <thread>

namespace kvstash::testing {

// Polls `done` every 5 ms for up to `within`; whether it held.
template <typename Condition>
bool Eventually(Condition done, std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace kvstash::testing
