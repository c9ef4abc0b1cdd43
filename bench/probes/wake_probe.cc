// How long one thread takes to wake another on this machine: the cost of
// every hand-off between threads on kvstash's request path. Two threads play
// ping-pong through a condition variable, an eventfd, and a spinning atomic;
// prints the median and p99 of one hand-off (half a round trip) in us.
//
//   kvstash_wake_probe [round_trips]
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// A one-way signal from one thread to the other.
struct Channel {
  virtual ~Channel() = default;
  virtual void Signal() = 0;
  virtual void Wait() = 0;
};

struct CondVarChannel : Channel {
  std::mutex mutex;
  std::condition_variable cv;
  bool ready = false;
  void Signal() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ready = true;
    }
    cv.notify_one();
  }
  void Wait() override {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [this] { return ready; });
    ready = false;
  }
};

struct EventFdChannel : Channel {
  int fd = eventfd(0, EFD_CLOEXEC);
  ~EventFdChannel() override { close(fd); }
  void Signal() override {
    uint64_t one = 1;
    if (write(fd, &one, 8) != 8) std::abort();
  }
  void Wait() override {
    uint64_t n;
    if (read(fd, &n, 8) != 8) std::abort();
  }
};

struct SpinChannel : Channel {
  std::atomic<bool> ready{false};
  void Signal() override { ready.store(true, std::memory_order_release); }
  void Wait() override {
    while (!ready.exchange(false, std::memory_order_acquire)) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }
};

void Measure(const char* name, Channel& ping, Channel& pong, int round_trips, bool idle_gap) {
  std::thread echo([&] {
    for (int i = 0; i < round_trips; ++i) {
      ping.Wait();
      pong.Signal();
    }
  });
  std::vector<double> us;
  for (int i = 0; i < round_trips; ++i) {
    // A gap lets the other core go idle first, as between engine requests.
    if (idle_gap) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const auto start = Clock::now();
    ping.Signal();
    pong.Wait();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
  }
  echo.join();
  std::sort(us.begin(), us.end());
  std::printf("%-28s hand-off p50 %7.2f us  p99 %7.2f us\n", name, us[us.size() / 2],
              us[us.size() * 99 / 100]);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  for (bool gap : {false, true}) {
    const char* suffix = gap ? ", after 200 us idle" : ", back to back";
    auto run = [&](const char* kind, auto make) {
      auto a = make(), b = make();
      Measure((std::string(kind) + suffix).c_str(), *a, *b, n, gap);
    };
    run("condvar", [] { return std::make_unique<CondVarChannel>(); });
    run("eventfd", [] { return std::make_unique<EventFdChannel>(); });
    run("spin", [] { return std::make_unique<SpinChannel>(); });
  }
  return 0;
}
