// Binding, draining and removing the daemon's doorbell socket.
#include "doorbell.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace kvstash::server {

Result<std::unique_ptr<Doorbell>> Doorbell::Create(const std::string& path, mode_t mode) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("doorbell path \"" + path + "\" is " +
                                   std::to_string(path.size()) + " bytes; a unix socket path " +
                                   "holds at most " + std::to_string(sizeof(address.sun_path) - 1));
  }
  // lstat: a symlink is refused, never followed.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::Unavailable("doorbell path " + path +
                                 " holds something that is not a socket (a file, a symlink or "
                                 "a folder); remove it");
    }
    // The ipc socket beside it was checked free of a live daemon: this one
    // is a dead daemon's.
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::Unavailable("cannot remove the stale doorbell " + path + ": " +
                                 std::strerror(errno));
    }
  }
  std::unique_ptr<Doorbell> bell(new Doorbell());
  bell->fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (bell->fd_ < 0) {
    return Status::Internal(std::string("cannot create the doorbell socket: ") +
                            std::strerror(errno));
  }
  // Every datagram then carries its sender's pid, whoever sent it.
  const int on = 1;
  if (setsockopt(bell->fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
    return Status::Internal(std::string("cannot ask for the doorbell's sender credentials: ") +
                            std::strerror(errno));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  // bind never follows or replaces what is at the path (EADDRINUSE).
  if (bind(bell->fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Status::Unavailable("cannot bind the doorbell " + path + ": " + std::strerror(errno));
  }
  bell->path_ = path;
  {
    std::ifstream qlen("/proc/sys/net/unix/max_dgram_qlen");
    int length = 0;
    if (qlen >> length && length > 0) bell->queue_length_ = std::min(length, kMaxPerWake);
  }
  if (chmod(path.c_str(), mode) != 0) {
    return Status::Internal("cannot set mode on the doorbell " + path + ": " +
                            std::strerror(errno));
  }
  return bell;
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) close(fd_);
  if (!path_.empty()) unlink(path_.c_str());
}

int Doorbell::Drain(std::vector<pid_t>* senders) {
  int read = 0;
  char byte[8];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  for (; read < kMaxPerWake; ++read) {
    iovec data{byte, sizeof(byte)};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    if (recvmsg(fd_, &message, MSG_DONTWAIT) < 0) break;
    pid_t pid = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred credentials{};
        std::memcpy(&credentials, CMSG_DATA(c), sizeof(credentials));
        pid = credentials.pid;
      }
    }
    if (std::find(senders->begin(), senders->end(), pid) == senders->end()) senders->push_back(pid);
  }
  return read;
}

}  // namespace kvstash::server
