#include "kvstash/endpoint.h"

namespace kvstash {

std::string NormalizeEndpoint(const std::string& endpoint) {
  if (endpoint.empty() || endpoint.find("://") != std::string::npos) return endpoint;
  return "ipc://" + endpoint;
}

std::string ClientEndpoint(const std::string& given, const std::string& from_environment) {
  if (!given.empty()) return NormalizeEndpoint(given);
  if (!from_environment.empty()) return NormalizeEndpoint(from_environment);
  return kDefaultSocket;
}

}  // namespace kvstash
