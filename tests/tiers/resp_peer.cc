// The scripted RESP peer (see resp_peer.h).
#include "resp_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace kvstash::tiers::testing {
namespace {

// Reads one RESP array of bulk strings (a command as hiredis sends it)
// from `buffer`, consuming it; false until it is whole.
bool TakeCommand(std::string& buffer, std::vector<std::string>* command) {
  size_t pos = 0;
  auto line = [&](std::string* out) {
    const size_t end = buffer.find("\r\n", pos);
    if (end == std::string::npos) return false;
    *out = buffer.substr(pos, end - pos);
    pos = end + 2;
    return true;
  };
  std::string text;
  if (!line(&text) || text.empty() || text[0] != '*') return false;
  const long n = std::strtol(text.c_str() + 1, nullptr, 10);
  std::vector<std::string> args;
  for (long i = 0; i < n; ++i) {
    if (!line(&text) || text.empty() || text[0] != '$') return false;
    const size_t len = std::strtoul(text.c_str() + 1, nullptr, 10);
    if (buffer.size() < pos + len + 2) return false;
    args.push_back(buffer.substr(pos, len));
    pos += len + 2;
  }
  buffer.erase(0, pos);
  *command = std::move(args);
  return true;
}

// Sends everything unless the peer stops meanwhile (a client that stopped
// reading must not hold the peer's destructor).
bool SendAll(int fd, const std::string& bytes, const std::atomic<bool>& stopping) {
  size_t sent = 0;
  while (sent < bytes.size() && !stopping) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return sent == bytes.size();
}

}  // namespace

std::unique_ptr<RespPeer> RespPeer::Start(Script script) {
  std::unique_ptr<RespPeer> peer(new RespPeer());
  peer->script_ = std::move(script);
  peer->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (peer->listen_fd_ < 0 ||
      ::bind(peer->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(peer->listen_fd_, 16) != 0 ||
      ::getsockname(peer->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return nullptr;
  }
  peer->port_ = ntohs(addr.sin_port);
  peer->acceptor_ = std::thread([p = peer.get()] { p->Accept(); });
  return peer;
}

RespPeer::~RespPeer() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& t : servers_) t.join();
  for (int fd : fds_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void RespPeer::Accept() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    fds_.push_back(fd);
    servers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void RespPeer::Serve(int fd) {
  std::string buffer;
  char chunk[16384];
  while (!stopping_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return;
    buffer.append(chunk, static_cast<size_t>(n));
    std::vector<std::string> command;
    while (TakeCommand(buffer, &command)) {
      commands_.fetch_add(1);
      Answer answer = script_(command);
      if (!SendAll(fd, answer.bytes, stopping_)) return;
      while (answer.more && !stopping_) {
        const std::string more = answer.more();
        if (more.empty() || !SendAll(fd, more, stopping_)) break;
      }
    }
  }
}

}  // namespace kvstash::tiers::testing
