#include "daemon/image_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/files.h"
#include "gtest/gtest.h"

namespace airlock::daemon {
namespace {

using nlohmann::json;

class ImageConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-image-config-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_TRUE(MakeDirs(root_ + "/etc").ok());
  }
  void TearDown() override { (void)RemoveTree(root_); }

  void Write(const std::string& path, const std::string& data) {
    ASSERT_TRUE(WriteFileAtomic(root_ + "/" + path, data).ok());
  }

  std::string root_;
};

TEST_F(ImageConfigTest, FillsWhatTheSpecLeavesOutAndTheSpecWins) {
  image::ImageConfig config;
  config.env = {"PATH=/opt/bin:/usr/bin", "FROM_IMAGE=yes", "SHARED=image", "EMPTY="};
  config.working_dir = "/app";
  json doc = {{"env", {{"SHARED", "spec"}}}};
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["env"], (json{{"PATH", "/opt/bin:/usr/bin"},
                              {"FROM_IMAGE", "yes"},
                              {"SHARED", "spec"},
                              {"EMPTY", ""}}));
  EXPECT_EQ(doc["workdir"], "/app");
  EXPECT_FALSE(doc.contains("user")) << "no User in the config: the spec's default applies";

  json own = {{"workdir", "/sandbox/workspace"}};
  ASSERT_TRUE(ApplyImageConfig(config, root_, &own).ok());
  EXPECT_EQ(own["workdir"], "/sandbox/workspace");
}

TEST_F(ImageConfigTest, NumericUsers) {
  image::ImageConfig config;
  config.user = "1234:2345";
  json doc = json::object();
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["user"], (json{{"uid", 1234}, {"gid", 2345}}));

  config.user = "1234";
  doc = json::object();
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["user"], (json{{"uid", 1234}, {"gid", 1234}}));

  json own = {{"user", {{"uid", 5000}, {"gid", 5000}}}};
  ASSERT_TRUE(ApplyImageConfig(config, root_, &own).ok());
  EXPECT_EQ(own["user"], (json{{"uid", 5000}, {"gid", 5000}})) << "the spec's user wins";
}

TEST_F(ImageConfigTest, NamesAreLookedUpInTheImagesOwnFiles) {
  Write("etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:1500:1600::/home/app:/bin/sh\n");
  Write("etc/group", "root:x:0:\nstaff:x:1700:\n");
  image::ImageConfig config;
  config.user = "app";
  json doc = json::object();
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["user"], (json{{"uid", 1500}, {"gid", 1600}})) << "the passwd entry's group";

  config.user = "app:staff";
  doc = json::object();
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["user"], (json{{"uid", 1500}, {"gid", 1700}}));

  for (const char* root_user : {"root", "0", "0:0"}) {
    config.user = root_user;
    doc = json::object();
    ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok()) << root_user;
    EXPECT_FALSE(doc.contains("user")) << root_user << ": sandboxes never run as root";
  }
}

// Attack: the image's etc/passwd is an absolute symlink to a host file. It resolves inside the
// image's root, as it would inside the sandbox, so the host's file is never read.
TEST_F(ImageConfigTest, APasswdSymlinkResolvesInsideTheImage) {
  ASSERT_TRUE(MakeDirs(root_ + "/host-copy").ok());
  Write("host-copy/passwd", "daemon:x:4321:4321::/:/bin/sh\n");
  ASSERT_EQ(::symlink("/host-copy/passwd", (root_ + "/etc/passwd").c_str()), 0);
  image::ImageConfig config;
  config.user = "daemon";  // uid 1 in the host's /etc/passwd on Debian
  json doc = json::object();
  ASSERT_TRUE(ApplyImageConfig(config, root_, &doc).ok());
  EXPECT_EQ(doc["user"]["uid"], 4321);
}

TEST_F(ImageConfigTest, BadConfigsAreClearErrorsAndChangeNothing) {
  Write("etc/passwd", "app:x:1500:1600::/home/app:/bin/sh\n");
  const json original = {{"env", {{"A", "1"}}}};
  struct Case {
    image::ImageConfig config;
    std::string message;
  };
  image::ImageConfig bad_env, no_user, no_group;
  bad_env.env = {"A=2", "NOEQUALS"};
  no_user.user = "nobody-here";
  no_group.user = "app:nogroup";
  for (const Case& c : {Case{bad_env, "image config Env \"NOEQUALS\": not NAME=value"},
                        Case{no_user,
                             "image config User \"nobody-here\": no such user in the "
                             "image's etc/passwd"},
                        Case{no_group,
                             "image config User \"app:nogroup\": a group name, and the "
                             "image has no readable etc/group"}}) {
    json doc = original;
    absl::Status s = ApplyImageConfig(c.config, root_, &doc);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(doc, original);
  }
}

}  // namespace
}  // namespace airlock::daemon
