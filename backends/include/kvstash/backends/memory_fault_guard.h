// Copies of engine memory that an engine can break from its side. A host
// backend allocation is a MAP_SHARED mapping of the engine's POSIX shared
// memory; when the engine shrinks the object (ftruncate) or /dev/shm has no
// room for a page the copy writes, the next access raises SIGBUS in the
// daemon. Checking the size before the copy is a race (the engine can
// shrink it between the check and the access), so the copy itself runs under
// a recovery point: a SIGBUS whose address lies inside the range the copy
// declared jumps back to RunGuarded, which reports the fault as a value.
//
// Process state, the one exception to "no global state": POSIX signal
// dispositions are per process, so the handler is installed once (Install)
// and keeps the action it replaced (written once, before the handler goes
// in, read-only after) to hand on every fault that is not ours: a SIGBUS
// outside a guarded copy still kills the process, through ASan's or the
// default handler. The recovery point itself is thread_local: each copy
// thread has its own, and the handler runs on the faulting thread.
//
// SIGSEGV is not caught: the daemon's mapping and its protection are its own,
// so no engine can make an access to it fault that way; a SIGSEGV is a bug of
// ours and must crash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::backends {

class MemoryFaultGuard {
 public:
  // Installs the SIGBUS handler once per process; later calls do nothing.
  static void Install();

  // Runs body(arg). Returns true when it ran to the end; false when it
  // raised SIGBUS at an address inside [begin, begin + bytes), with that
  // address in *fault_address. The body must be plain memory copies: the
  // jump back skips its remaining code (no destructors, locks or
  // allocations may be live in it). Install() must have run.
  static bool RunGuarded(const void* begin, size_t bytes, void (*body)(void*), void* arg,
                         uintptr_t* fault_address);
};

}  // namespace kvstash::backends
