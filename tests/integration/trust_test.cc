// Another OS user's engine: kvstashd opens no shared memory for it that it
// could not open itself, and without admin rights it clears and sees only its
// own registrations. Needs root to create and become a second user; skipped,
// visibly, otherwise.
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace kvstash::testing {
namespace {

constexpr const char* kTenantUser = "kvstash-tenant";

class Trust : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--socket-mode", "0666"});
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    return args;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create and become a second OS user";
    if (getpwnam(kTenantUser) == nullptr &&
        std::system(
            (std::string("useradd --system --no-create-home ") + kTenantUser + " >/dev/null 2>&1")
                .c_str()) != 0) {
      GTEST_SKIP() << "useradd " << kTenantUser << " failed";
    }
    const struct passwd* tenant = getpwnam(kTenantUser);
    ASSERT_NE(tenant, nullptr);
    uid_ = tenant->pw_uid;
    gid_ = tenant->pw_gid;
    SetUpDaemon();
  }
  void SetUpDaemon() {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    // The tenant must reach the socket inside the test's private folder.
    chmod(std::filesystem::path(daemon_->socket_path()).parent_path().c_str(), 0711);
  }
  // Runs the tenant's actions on one connection; returns its output lines.
  std::vector<std::string> Tenant(const std::vector<std::string>& actions) {
    std::vector<std::string> args = {"--socket",           daemon_->socket(), "--uid",
                                     std::to_string(uid_), "--gid",           std::to_string(gid_)};
    args.insert(args.end(), actions.begin(), actions.end());
    ProcessResult run = RunBinary("kvstash_test_tenant", args);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    std::vector<std::string> lines;
    std::istringstream in(run.output);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    EXPECT_EQ(lines.size(), actions.size()) << run.output;
    lines.resize(actions.size());
    return lines;
  }

  std::vector<std::string> extra_args_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

TEST_F(Trust, ARootOnlySharedMemoryObjectCannotBeRegisteredByAnotherUser) {
  // The fixture's engine memory belongs to root; made mode 0600.
  const HostShm shm = std::get<HostShm>(engine_->Registration("m").allocations[0]);
  ASSERT_EQ(chmod(("/dev/shm" + shm.name).c_str(), 0600), 0);
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + shm.name).c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, 0u);
  ASSERT_EQ(st.st_mode & 0077, 0u) << std::oct << st.st_mode;
  const auto lines = Tenant({"register-shm:" + shm.name + ":" + std::to_string(shm.size_bytes),
                             "store-own:tenant-model"});
  EXPECT_EQ(lines[0],
            "register-shm NotFound peer uid " + std::to_string(uid_) + " may not open " + shm.name);
  // Its own memory it registers and stores into.
  EXPECT_EQ(lines[1], "store-own Ok 2");
}

TEST_F(Trust, ANonAdminClearsOnlyItsOwnScopes) {
  const auto tokens = PromptTokens(5, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(3, tokens, Blocks(0, 8))) {
    ASSERT_EQ(o.result, ChunkResult::kStored);
  }
  // The tenant stores two chunks of its own model and clears all it may.
  // (A registration of the same model, salt and layout would share root's
  // scope, and its owner may clear that scope: it can read it anyway.)
  const auto lines = Tenant({"store-own:tenant-model", "clear"});
  EXPECT_EQ(lines[0], "store-own Ok 2");
  EXPECT_EQ(lines[1], "clear Ok 2");
  auto hit = client_->Lookup(reg_.id, ChunkKeys(reg_, tokens.data(), tokens.size()), 1).get();
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_chunks, 2u) << "root's chunks survived the tenant's Clear";
}

TEST_F(Trust, ANonAdminSeesOnlyItsOwnRegistrationsInDetail) {
  const auto lines = Tenant({"store-own:tenant-model", "describe"});
  ASSERT_EQ(lines[1].rfind("describe Ok ", 0), 0u) << lines[1];
  const auto doc = nlohmann::json::parse(lines[1].substr(12));
  ASSERT_EQ(doc["registrations"].size(), 1u);
  EXPECT_EQ(doc["registrations"][0]["model"], "tenant-model");
  EXPECT_EQ(doc["other_registrations"], 1u);
  EXPECT_EQ(doc["viewer_is_admin"], false);
  EXPECT_EQ(lines[1].find("test-model"), std::string::npos) << "root's registration leaked";
}

TEST_F(Trust, ANonAdminSeesOnlyItsOwnRegistrationsInStats) {
  const auto lines = Tenant({"store-own:tenant-model", "stats"});
  ASSERT_EQ(lines[1].rfind("stats Ok ", 0), 0u) << lines[1];
  const auto doc = nlohmann::json::parse(lines[1].substr(9));
  ASSERT_EQ(doc["per_registration"].size(), 1u) << lines[1];
  EXPECT_EQ(doc["per_registration"][0]["model"], "tenant-model");
  EXPECT_EQ(doc["other_registrations"], 1u);
  EXPECT_EQ(doc["viewer_is_admin"], false);
  EXPECT_EQ(lines[1].find("test-model"), std::string::npos) << "root's registration leaked";
  EXPECT_EQ(lines[1].find(std::to_string(reg_.id)), std::string::npos)
      << "root's registration id leaked";
  // The daemon's own user is an admin: it sees every registration.
  auto mine = client_->Stats().get();
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(mine->json)["viewer_is_admin"], true);
  EXPECT_NE(mine->json.find("test-model"), std::string::npos);
}

TEST_F(Trust, MembersOfTheAdminGroupSeeAndClearEverything) {
  daemon_.reset();  // again, with the tenant's group as the admin group
  extra_args_ = {"--admin-group", std::to_string(gid_)};
  SetUpDaemon();
  ASSERT_FALSE(HasFatalFailure());
  const auto tokens = PromptTokens(5, 128, 0);
  FillAndStore(3, tokens, Blocks(0, 8));
  const auto lines = Tenant({"describe", "clear"});
  const auto doc = nlohmann::json::parse(lines[0].substr(12));
  EXPECT_EQ(doc["registrations"].size(), 1u);
  EXPECT_EQ(doc["viewer_is_admin"], true);
  EXPECT_EQ(lines[1], "clear Ok 2");
}

}  // namespace
}  // namespace kvstash::testing
