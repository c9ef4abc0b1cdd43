// ipc:// socket file handling.
#include "ipc_path.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvstash::server {

std::string IpcPath(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  return endpoint.rfind(prefix, 0) == 0 ? endpoint.substr(prefix.size()) : "";
}

Status PrepareIpcPath(const std::string& path) {
  std::error_code error;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  if (error) {
    return Status::Unavailable("cannot create socket folder " + folder.string() + ": " +
                               error.message());
  }
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("socket path " + path + " is longer than " +
                                   std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  if (access(path.c_str(), F_OK) != 0) return Status::Ok();
  // A file is there: a live daemon, or one left by a crash.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  if (live) {
    return Status::Unavailable("another kvstashd is serving at " + path +
                               "; stop it or choose another --socket");
  }
  unlink(path.c_str());
  return Status::Ok();
}

}  // namespace kvstash::server
