// The SIGBUS recovery point (see memory_fault_guard.h for why).
#include "kvstash/backends/memory_fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

namespace kvstash::backends {
namespace {

struct RecoveryPoint {
  sigjmp_buf jump;
  uintptr_t begin = 0;
  uintptr_t end = 0;
  volatile uintptr_t fault = 0;  // written by the handler
};

// The copy in progress on this thread, if guarded.
thread_local RecoveryPoint* volatile t_point = nullptr;

// The action replaced by Install: written once before the handler is
// installed, read-only afterwards.
struct sigaction g_previous_bus;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  RecoveryPoint* point = t_point;
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (point != nullptr && address >= point->begin && address < point->end) {
    point->fault = address;
    t_point = nullptr;
    siglongjmp(point->jump, 1);
  }
  // Not a guarded copy: whoever handled SIGBUS before us decides.
  if ((g_previous_bus.sa_flags & SA_SIGINFO) && g_previous_bus.sa_sigaction != nullptr) {
    g_previous_bus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(signal);
    return;
  }
  // Default action: restore it and return; the access faults again and the
  // process dies of SIGBUS as it would have without us.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGBUS, &fallback, nullptr);
}

}  // namespace

void MemoryFaultGuard::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, nullptr, &g_previous_bus);
    sigaction(SIGBUS, &action, nullptr);
  });
}

bool MemoryFaultGuard::RunGuarded(const void* begin, size_t bytes, void (*body)(void*), void* arg,
                                  uintptr_t* fault_address) {
  RecoveryPoint point;
  point.begin = reinterpret_cast<uintptr_t>(begin);
  point.end = point.begin + bytes;
  // savemask = 1: the jump restores the signal mask, so SIGBUS is not left
  // blocked on this thread.
  if (sigsetjmp(point.jump, 1) != 0) {
    *fault_address = point.fault;
    return false;
  }
  t_point = &point;
  body(arg);
  t_point = nullptr;
  return true;
}

}  // namespace kvstash::backends
