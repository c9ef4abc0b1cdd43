// kvstashd: the KV-cache offload daemon. Parses the config, starts the
// daemon, and stops it cleanly on SIGINT/SIGTERM.
#include <signal.h>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <thread>

#include "kvstash/config/server_config.h"
#include "kvstash/server/daemon.h"

namespace {

spdlog::level::level_enum SpdlogLevel(kvstash::config::LogLevel level) {
  using kvstash::config::LogLevel;
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

int main(int argc, char** argv) {
  kvstash::config::ParseOutcome parsed = kvstash::config::ParseServerConfig(argc, argv);
  if (parsed.should_exit) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  auto logger = spdlog::stderr_color_mt("kvstashd");
  logger->set_level(SpdlogLevel(parsed.config.log_level));
  spdlog::set_default_logger(logger);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=kvstashd=debug raises one logger
  for (const auto& [name, value] : kvstash::config::EffectiveConfig(parsed.config)) {
    logger->debug("config {} = {}", name, value);
  }

  // Signals go to one thread that waits for them: no handler, no global.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto daemon = kvstash::server::Daemon::Create(parsed.config);
  if (!daemon.ok()) {
    logger->error("cannot start: {}", daemon.status().ToString());
    return 1;
  }
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    logger->info("received signal {}", signal);
    (*daemon)->RequestStop();
  });
  kvstash::Status status = (*daemon)->Run();
  // Wake the waiter if Run returned on its own (bind failure).
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (!status.ok()) {
    logger->error("{}", status.ToString());
    return 1;
  }
  return 0;
}
