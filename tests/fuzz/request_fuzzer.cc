// libFuzzer over the whole request path: decode and verify, the handlers,
// the chunk store and the host backend's copies, in one process (see
// fuzz_session.h). Built with -DKVSTASH_BUILD_FUZZERS=ON under clang with
// ASan and UBSan; scripts/fuzz.sh builds and runs it.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz_session.h"

namespace {

kvstash::fuzz::FuzzSession& Session() {
  // One Service for the whole run: creating its pool and threads per input
  // would cost more than the input. Each input undoes its registrations.
  static auto* session = new kvstash::fuzz::FuzzSession();
  return *session;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Refused requests log warnings; at fuzzing rates that is all it would do.
  spdlog::set_level(spdlog::level::off);
  Session();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Session().Run(data, size);
  return 0;
}
