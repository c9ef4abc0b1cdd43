// ZeroMQ endpoints as users write them: the one default socket, and a plain
// path taken as an ipc socket. Shared by kvstashd, libkvstash and the CLI so
// that every program reads "--socket" the same way.
#pragma once

#include <string>

namespace kvstash {

// Where kvstashd listens unless told otherwise (--socket, KVSTASH_SOCKET).
inline constexpr char kDefaultSocket[] = "ipc:///run/kvstash/kvstash.sock";
// The environment variable every client reads when no socket is given.
inline constexpr char kSocketEnvVar[] = "KVSTASH_SOCKET";

// "ipc://P", "tcp://H:P" and other endpoints stay as they are; a plain path
// ("/run/kvstash/kvstash.sock", "./k.sock", "k.sock") becomes "ipc://PATH".
// An empty string stays empty.
std::string NormalizeEndpoint(const std::string& endpoint);

// The endpoint a client uses: `given` if not empty, else `from_environment`
// (the value of $KVSTASH_SOCKET, which the program reads at its edge; empty
// when unset) if not empty, else kDefaultSocket; normalized.
std::string ClientEndpoint(const std::string& given, const std::string& from_environment);

}  // namespace kvstash
