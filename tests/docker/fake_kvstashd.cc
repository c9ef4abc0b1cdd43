// A stand-in for kvstashd in the entrypoint tests: the daemon's real
// configuration parsing (so --print-config, precedence and errors are
// exactly kvstashd's), then, instead of serving, one line with its pid and
// arguments, so a test can tell that the entrypoint exec'd it.
#include <unistd.h>

#include <cstdio>

#include "kvstash/config/server_config.h"

int main(int argc, char** argv) {
  const kvstash::config::ParseOutcome outcome = kvstash::config::ParseServerConfig(argc, argv);
  if (outcome.should_exit) {
    std::fputs(outcome.output.c_str(), outcome.exit_code == 0 ? stdout : stderr);
    return outcome.exit_code;
  }
  std::printf("fake kvstashd pid=%d", static_cast<int>(getpid()));
  for (int i = 1; i < argc; ++i) std::printf(" %s", argv[i]);
  std::printf("\n");
  return 0;
}
