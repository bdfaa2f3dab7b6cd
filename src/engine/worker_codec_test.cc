// The worker plan on the wire between the fork-server and its zygote (engine/internal/plan.h).
#include <vector>

#include "engine/internal/plan.h"
#include "gtest/gtest.h"

namespace airlock::engine::internal {
namespace {

TEST(WorkerCodecTest, RoundTripsWithDescriptorsAsIndexes) {
  WorkerPlan in;
  in.setup.uid = 10001;
  in.setup.gid = 10002;
  in.setup.cgroup_join_fds = {40, 41};
  in.setup.hostname = "sandbox";
  in.setup.staging_dir = "/run/airlock/sb-1/root";
  in.setup.mounts.push_back({.kind = MountOp::Kind::kTmpfs,
                             .target = "/sandbox/tmp",
                             .data = "size=64m",
                             .flags = 6,
                             .mode = 01777,
                             .optional = true});
  in.setup.mounts.push_back({.kind = MountOp::Kind::kBindFd, .target = "/w", .fd = 42});
  in.setup.landlock_abi = 4;
  in.setup.landlock_writable = {"/sandbox/tmp"};
  in.setup.sync_fd = 43;
  in.setup.error_fd = 44;
  in.stdio[0] = 45;
  in.stdio[1] = 46;
  in.stdio[2] = 47;
  in.status_fd = 48;
  in.rlimits = {{7, 1024, 2048}};
  in.seccomp_filter = std::string("\x20\x00\x00\x00", 4);
  in.cgroup_fd = -1;

  std::vector<int> fds;
  std::string wire = EncodeWorkerPlan(in, &fds);
  EXPECT_EQ(fds, (std::vector<int>{40, 41, 42, 43, 44, 45, 46, 47, 48}));
  // The receiver's descriptors have other numbers.
  std::vector<int> received = {140, 141, 142, 143, 144, 145, 146, 147, 148};
  WorkerPlan out;
  ASSERT_TRUE(DecodeWorkerPlan(wire, received.data(), static_cast<int>(received.size()), &out));
  EXPECT_EQ(out.setup.uid, 10001u);
  EXPECT_EQ(out.setup.gid, 10002u);
  EXPECT_EQ(out.setup.cgroup_join_fds, (std::vector<int>{140, 141}));
  EXPECT_EQ(out.setup.hostname, "sandbox");
  ASSERT_EQ(out.setup.mounts.size(), 2u);
  EXPECT_EQ(out.setup.mounts[0].kind, MountOp::Kind::kTmpfs);
  EXPECT_EQ(out.setup.mounts[0].data, "size=64m");
  EXPECT_EQ(out.setup.mounts[0].mode, 01777u);
  EXPECT_TRUE(out.setup.mounts[0].optional);
  EXPECT_EQ(out.setup.mounts[0].fd, -1);
  EXPECT_EQ(out.setup.mounts[1].fd, 142);
  EXPECT_EQ(out.setup.landlock_abi, 4);
  EXPECT_EQ(out.setup.sync_fd, 143);
  EXPECT_EQ(out.setup.error_fd, 144);
  EXPECT_EQ(out.stdio[2], 147);
  EXPECT_EQ(out.status_fd, 148);
  ASSERT_EQ(out.rlimits.size(), 1u);
  EXPECT_EQ(out.rlimits[0].hard, 2048u);
  EXPECT_EQ(out.seccomp_filter, in.seccomp_filter);
  EXPECT_EQ(out.cgroup_fd, -1);
}

TEST(WorkerCodecTest, RefusesIndexesBeyondTheDescriptorsSent) {
  WorkerPlan in;
  in.setup.sync_fd = 10;
  in.setup.error_fd = 11;
  std::vector<int> fds;
  std::string wire = EncodeWorkerPlan(in, &fds);
  ASSERT_EQ(fds.size(), 2u);
  WorkerPlan out;
  int one[] = {5};
  EXPECT_FALSE(DecodeWorkerPlan(wire, one, 1, &out));  // error_fd's index 1 was not sent
  EXPECT_FALSE(DecodeWorkerPlan(wire.substr(0, wire.size() - 2), fds.data(), 2, &out));
  EXPECT_FALSE(DecodeWorkerPlan(wire + "x", fds.data(), 2, &out));
}

}  // namespace
}  // namespace airlock::engine::internal
