#include "redis_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <thread>

namespace kvstash::tiers::testing {
namespace {

bool OnPath(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

bool Bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A port nobody listens on now, and its cluster bus port (port + 10000)
// free too.
int FreePort() {
  static std::mt19937 random(static_cast<unsigned>(::getpid()) ^
                             static_cast<unsigned>(std::time(nullptr)));
  for (;;) {
    const int port = 20000 + static_cast<int>(random() % 35000);
    if (Bindable(port) && Bindable(port + 10000)) return port;
  }
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string Run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), p)) > 0) out.append(buffer.data(), n);
  ::pclose(p);
  return out;
}

}  // namespace

bool RedisAvailable() { return OnPath("redis-server") && OnPath("redis-cli"); }

Result<std::unique_ptr<RedisProcess>> RedisProcess::Start(const std::vector<std::string>& extra) {
  std::unique_ptr<RedisProcess> p(new RedisProcess());
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/kvstash-redis-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return Status::Internal("mkdtemp failed");
  p->dir_ = pattern;
  p->port_ = FreePort();
  p->args_ = {"--port",
              std::to_string(p->port_),
              "--bind",
              "127.0.0.1",
              "--save",
              "",
              "--appendonly",
              "no",
              "--dir",
              p->dir_,
              "--protected-mode",
              "no",
              "--loglevel",
              "warning"};
  p->args_.insert(p->args_.end(), extra.begin(), extra.end());
  KVSTASH_RETURN_IF_ERROR(p->Launch());
  return p;
}

Status RedisProcess::Launch() {
  pid_ = ::fork();
  if (pid_ < 0) return Status::Internal("fork failed");
  if (pid_ == 0) {
    std::vector<char*> argv{const_cast<char*>("redis-server")};
    for (std::string& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/redis.log";
    if (std::freopen(log.c_str(), "w", stdout) == nullptr) ::_exit(126);
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    // PONG, or a refusal that proves the server is up (no default user).
    const std::string pong = Cli({"PING"});
    if (pong.find("PONG") != std::string::npos || pong.find("NOAUTH") != std::string::npos)
      return Status::Ok();
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("redis-server exited at start: " +
                                 Run("cat " + Quote(dir_ + "/redis.log")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::TimedOut("redis-server on port " + std::to_string(port_) +
                          " did not answer PING in 10 s");
}

RedisProcess::~RedisProcess() {
  Kill();
  if (!dir_.empty()) std::system(("rm -rf " + Quote(dir_)).c_str());
}

void RedisProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisProcess::Pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisProcess::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

Status RedisProcess::Restart() {
  Kill();
  return Launch();
}

std::string RedisProcess::Cli(const std::vector<std::string>& args) const {
  std::string command = "redis-cli -h 127.0.0.1 -p " + std::to_string(port_);
  for (const std::string& a : args) command += " " + Quote(a);
  return Run(command);
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(int nodes) {
  auto cluster = std::make_unique<RedisCluster>();
  for (int i = 0; i < nodes; ++i) {
    Result<std::unique_ptr<RedisProcess>> node =
        RedisProcess::Start({"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                             "--cluster-node-timeout", "2000"});
    if (!node.ok()) return node.status();
    cluster->nodes_.push_back(std::move(node).value());
  }
  std::string command = "redis-cli --cluster create";
  for (const std::string& e : cluster->endpoints()) command += " " + e;
  command += " --cluster-replicas 0 --cluster-yes";
  const std::string created = Run(command);
  if (created.find("All 16384 slots covered") == std::string::npos) {
    return Status::Unavailable("redis-cli --cluster create failed: " + created);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (auto& node : cluster->nodes_) {
    while (node->Cli({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::TimedOut("cluster node " + node->endpoint() +
                                " never reached cluster_state:ok");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return cluster;
}

std::vector<std::string> RedisCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& node : nodes_) out.push_back(node->endpoint());
  return out;
}

}  // namespace kvstash::tiers::testing
