// ipc:// socket file handling.
#include "ipc_path.h"

#include <fcntl.h>
#include <sys/file.h>
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

// Takes the exclusive lock on `lock_path`, or says who holds it. The file
// may be removed by its last holder between our open and flock: then the
// lock is on a file nobody else will open, and we try again.
Result<int> TakeLock(const std::string& lock_path, const std::string& path) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return Status::Unavailable("cannot open the lock file " + lock_path + ": " +
                                 std::strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(fd);
      if (error == EWOULDBLOCK) {
        return Status::Unavailable("another kvstashd is serving at " + path + " (it holds " +
                                   lock_path + "); stop it or choose another --socket");
      }
      return Status::Unavailable("cannot lock " + lock_path + ": " + std::strerror(error));
    }
    struct stat held {
    }, named{};
    if (fstat(fd, &held) == 0 && stat(lock_path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      return fd;
    }
    close(fd);  // removed meanwhile: the next open makes a fresh one
  }
  return Status::Unavailable("the lock file " + lock_path + " keeps being replaced");
}

// A socket left at `doorbell_path` is the dead owner's: removed. Anything
// else there is left for the doorbell to refuse, naming it.
Status RemoveStaleDoorbell(const std::string& doorbell_path) {
  struct stat st {};
  if (doorbell_path.empty() || lstat(doorbell_path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return Status::Ok();
  }
  if (unlink(doorbell_path.c_str()) != 0 && errno != ENOENT) {
    return Status::Unavailable("cannot remove the stale doorbell " + doorbell_path + ": " +
                               std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

IpcPathClaim::~IpcPathClaim() {
  if (fd_ < 0) return;
  unlink(lock_path_.c_str());  // before the lock goes: the next daemon makes a fresh file
  close(fd_);
}

std::string IpcPath(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  return endpoint.rfind(prefix, 0) == 0 ? endpoint.substr(prefix.size()) : "";
}

Result<std::unique_ptr<IpcPathClaim>> ClaimIpcPath(const std::string& path,
                                                   const std::string& doorbell_path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("socket path \"" + path + "\" must be 1 to " +
                                   std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) KVSTASH_RETURN_IF_ERROR(CreateFolders(folder));
  std::unique_ptr<IpcPathClaim> claim(new IpcPathClaim());
  claim->lock_path_ = path + ".lock";
  Result<int> locked = TakeLock(claim->lock_path_, path);
  if (!locked.ok()) return locked.status();
  claim->fd_ = *locked;

  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return Status::Unavailable("cannot inspect socket path " + path + ": " +
                                 std::strerror(errno));
    }
    KVSTASH_RETURN_IF_ERROR(RemoveStaleDoorbell(doorbell_path));
    return claim;
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
    // A daemon that takes no lock (an older kvstashd) listens there.
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
  KVSTASH_RETURN_IF_ERROR(RemoveStaleDoorbell(doorbell_path));
  return claim;
}

}  // namespace kvstash::server
