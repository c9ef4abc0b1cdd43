#include "kvstash/endpoint.h"

#include <cstdlib>

namespace kvstash {

std::string NormalizeEndpoint(const std::string& endpoint) {
  if (endpoint.empty() || endpoint.find("://") != std::string::npos) return endpoint;
  return "ipc://" + endpoint;
}

std::string ClientEndpoint(const std::string& given) {
  if (!given.empty()) return NormalizeEndpoint(given);
  const char* from_env = std::getenv(kSocketEnvVar);
  if (from_env != nullptr && from_env[0] != '\0') return NormalizeEndpoint(from_env);
  return kDefaultSocket;
}

}  // namespace kvstash
