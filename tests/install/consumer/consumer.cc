// An engine written in C++, built against an installed kvstash: connects to
// the kvstashd named by argv[1], pings it and registers nothing.
#include <iostream>

#include <kvstash/client.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " SOCKET\n";
    return 2;
  }
  kvstash::ClientOptions options;
  options.socket = argv[1];
  options.client_name = "install-test-cc";
  auto client = kvstash::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "C++ consumer: " << client.status().ToString() << "\n";
    return 1;
  }
  kvstash::Result<uint64_t> uptime_ms = (*client)->Ping().get();
  if (!uptime_ms.ok()) {
    std::cerr << "C++ consumer: " << uptime_ms.status().ToString() << "\n";
    return 1;
  }
  std::cout << "C++ consumer: ping Ok, daemon " << (*client)->server_info().server_version << " up "
            << *uptime_ms << " ms\n";
  return 0;
}
