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
namespace {

constexpr mode_t kFolderMode = 0750;

const char* KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a socket";
}

// Creates every missing folder of `folder` with mode 0750, whatever the
// umask (mkdir applies it; chmod does not). Existing folders keep theirs.
Status CreateFolders(const std::filesystem::path& folder) {
  std::filesystem::path built;
  for (const std::filesystem::path& part : folder) {
    built /= part;
    if (mkdir(built.c_str(), kFolderMode) == 0) {
      if (chmod(built.c_str(), kFolderMode) != 0) {
        return Status::Unavailable("cannot set mode 0750 on socket folder " + built.string() +
                                   ": " + std::strerror(errno));
      }
      continue;
    }
    if (errno == EEXIST) {
      struct stat st {};
      if (stat(built.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      return Status::Unavailable("cannot create socket folder " + folder.string() + ": " +
                                 built.string() + " exists and is not a directory");
    }
    return Status::Unavailable("cannot create socket folder " + built.string() + ": " +
                               std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

std::string IpcPath(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  return endpoint.rfind(prefix, 0) == 0 ? endpoint.substr(prefix.size()) : "";
}

Status PrepareIpcPath(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("socket path \"" + path + "\" must be 1 to " +
                                   std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) KVSTASH_RETURN_IF_ERROR(CreateFolders(folder));

  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Unavailable("cannot inspect socket path " + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::Unavailable("socket path " + path + " exists and is " + KindOf(st.st_mode) +
                               ", not a socket; kvstashd replaces only a stale socket: move it "
                               "away or choose another --socket");
  }
  // A socket is there: a live daemon's, or one left behind by a crash.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(std::string("socket() failed: ") + std::strerror(errno));
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const int connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (connected == 0) {
    return Status::Unavailable("another kvstashd is serving at " + path +
                               "; stop it or choose another --socket");
  }
  if (error != ECONNREFUSED) {
    return Status::Unavailable("cannot tell whether the socket at " + path +
                               " is stale: connect failed with " + std::strerror(error) +
                               "; remove it if no daemon uses it");
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::Unavailable("cannot remove the stale socket " + path + ": " +
                               std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace kvstash::server
