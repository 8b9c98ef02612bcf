// protocol/client_session.h: the identity a client gives the server for its logs and session list.
#include "protocol/client_session.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/env.h"

namespace rgpu::proto {
namespace {

class ClientIdentity : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* u = std::getenv("USER");
    had_user_ = u != nullptr;
    if (u) user_ = u;
  }
  void TearDown() override {
    if (had_user_) setenv("USER", user_.c_str(), 1);
    else unsetenv("USER");
    env::reload();
  }
  bool had_user_ = false;
  std::string user_;
};

TEST_F(ClientIdentity, NamesUserThenHostPidAndProgram) {
  setenv("USER", "alice", 1);
  env::reload();
  const std::string id = client_identity("");
  EXPECT_EQ(id.rfind("alice@", 0), 0u) << id;
  EXPECT_NE(id.find(" pid=" + std::to_string(getpid()) + " prog="), std::string::npos) << id;
  EXPECT_EQ(client_identity("gpu=1"), id + " gpu=1");
}

TEST_F(ClientIdentity, WithoutUserNamesTheAccountNotAQuestionMark) {
  // Containers and CI jobs often run without USER: the account's name still says who it is.
  unsetenv("USER");
  env::reload();
  const passwd* pw = getpwuid(getuid());
  ASSERT_NE(pw, nullptr);
  const std::string id = client_identity("");
  EXPECT_EQ(id.rfind(std::string(pw->pw_name) + "@", 0), 0u) << id;
}

}  // namespace
}  // namespace rgpu::proto
