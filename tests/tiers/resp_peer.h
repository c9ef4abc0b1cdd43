// A scripted TCP peer that speaks RESP, for replies a real Redis cannot
// produce (a negative slot, an array of 2^31 elements): it reads each
// command and answers with whatever bytes the test's script returns.
// Everything Redis itself does is tested against a real redis-server.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kvstash::tiers::testing {

class RespPeer {
 public:
  // The answer to one command (its arguments), as raw bytes. `more`, when
  // set, is called again and again after the answer until it returns ""
  // (a peer that keeps sending) or the peer stops.
  struct Answer {
    std::string bytes;
    std::function<std::string()> more;
  };
  using Script = std::function<Answer(const std::vector<std::string>& command)>;

  // Listens on a free loopback port; serves every connection on its own
  // thread until destroyed.
  static std::unique_ptr<RespPeer> Start(Script script);
  ~RespPeer();

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // Commands received, by every connection.
  uint64_t commands() const { return commands_.load(); }

 private:
  RespPeer() = default;
  void Accept();
  void Serve(int fd);

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> commands_{0};
  std::thread acceptor_;
  std::vector<std::thread> servers_;  // acceptor thread only, joined after it
  std::vector<int> fds_;              // acceptor thread only
};

// RESP encodings for scripts.
inline std::string RespError(const std::string& text) { return "-" + text + "\r\n"; }
inline std::string RespInteger(long long v) { return ":" + std::to_string(v) + "\r\n"; }
inline std::string RespBulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}
inline std::string RespArrayHeader(long long n) { return "*" + std::to_string(n) + "\r\n"; }

}  // namespace kvstash::tiers::testing
