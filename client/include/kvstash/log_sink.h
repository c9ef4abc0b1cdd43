// Where libkvstash's log lines go: ClientOptions::log (kvstash/client.h).
#pragma once

#include <functional>
#include <string_view>

namespace kvstash {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Receives the library's log lines. Called from the client's I/O thread.
using LogSink = std::function<void(LogLevel, std::string_view)>;

}  // namespace kvstash
