#include "cli/interp_commands.h"

#include <stdlib.h>

#include <sstream>
#include <string>

#include "cli/commands.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace airlock::cli {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

class InterpCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-cli-interp-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    common_.snapshot_dir = dir_ + "/snaps";
    common_.key_file = dir_ + "/key";
  }
  void TearDown() override { EXPECT_TRUE(RemoveTree(dir_).ok()); }

  std::string Script(const std::string& text) {
    std::string path = dir_ + "/script.js";
    EXPECT_TRUE(WriteFileAtomic(path, text).ok());
    return path;
  }

  int Run(InterpRunArgs args) {
    args.common = common_;
    out_.str("");
    err_.str("");
    return RunInterpScript(args, out_, err_);
  }

  int Resume(InterpResumeArgs args) {
    args.common = common_;
    out_.str("");
    err_.str("");
    return ResumeInterpSnapshot(args, out_, err_);
  }

  std::string dir_;
  InterpCommonArgs common_;
  std::ostringstream out_, err_;
};

TEST_F(InterpCommandsTest, RunPrintsTheResultAndConsole) {
  InterpRunArgs args;
  args.script = Script("console.log('working'); return {sum: 1 + 2};");
  EXPECT_EQ(Run(args), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"sum\":3}\n");
  EXPECT_EQ(err_.str(), "working\n");
}

TEST_F(InterpCommandsTest, ScriptErrorExitsOne) {
  InterpRunArgs args;
  args.script = Script("for (;;) {}");
  args.timeout = "50ms";
  EXPECT_EQ(Run(args), 1);
  EXPECT_THAT(err_.str(), HasSubstr("airlock interp: timeout: time limit"));
}

TEST_F(InterpCommandsTest, UsageErrors) {
  InterpRunArgs args;
  args.script = Script("1");
  args.tools = {"rm_rf"};
  EXPECT_EQ(Run(args), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unknown tool 'rm_rf' (available: human_approval, echo)"));
  args.tools.clear();
  args.memory = "lots";
  EXPECT_EQ(Run(args), kExitUsage);
  args.memory = "32M";
  args.script = dir_ + "/missing.js";
  EXPECT_EQ(Run(args), kExitUsage);
}

TEST_F(InterpCommandsTest, PauseWriteSnapshotResumeTwice) {
  InterpRunArgs args;
  args.script = Script(R"JS(
    const who = await tools.call('echo', {name: 'deploy'});
    const a = await tools.call('human_approval', {action: who.name});
    return a.approved ? 'shipped' : 'stopped';
  )JS");
  args.tools = {"human_approval", "echo"};
  args.common.json = true;
  common_.json = true;
  ASSERT_EQ(Run(args), 0) << err_.str();
  json paused = json::parse(out_.str());
  EXPECT_EQ(paused["outcome"], "paused");
  EXPECT_EQ(paused["pending"][0]["id"], "call-2");
  EXPECT_EQ(paused["pending"][0]["args"]["action"], "deploy");
  std::string snapshot = paused["snapshot"];

  InterpResumeArgs resume;
  resume.snapshot = snapshot;
  resume.call_id = "call-2";
  resume.result_json = R"({"approved": true})";
  ASSERT_EQ(Resume(resume), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["result"], "shipped");

  resume.result_json = R"({"approved": false})";
  ASSERT_EQ(Resume(resume), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["result"], "stopped");

  // Tampered: refused.
  absl::StatusOr<std::string> bytes = ReadFile(snapshot);
  ASSERT_TRUE(bytes.ok());
  std::string bad = *bytes;
  bad[bad.size() / 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(snapshot, bad).ok());
  EXPECT_EQ(Resume(resume), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("modified"));
}

TEST_F(InterpCommandsTest, ResumeNeedsExactlyOneAnswer) {
  InterpResumeArgs resume;
  resume.snapshot = dir_ + "/x.snap";
  resume.call_id = "call-1";
  EXPECT_EQ(Resume(resume), kExitUsage);
  resume.result_json = "{nope";
  EXPECT_EQ(Resume(resume), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--result is not JSON"));
}

}  // namespace
}  // namespace airlock::cli
