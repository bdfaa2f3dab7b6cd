// The contract of blob_store.h, run against every BlobStore implementation (add a factory to
// kFactories), and what only the local directory does (file modes, temp files, tampering).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/blob_store.h"
#include "store/local_blob_store.h"
#include "store/test_util.h"

namespace airlock::store {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

struct BlobStoreFactory {
  std::string name;
  // A blob store at `location` (an empty directory made for the test).
  std::function<absl::StatusOr<std::unique_ptr<BlobStore>>(const std::string& location)> open;
};

void PrintTo(const BlobStoreFactory& factory, std::ostream* os) { *os << factory.name; }

const BlobStoreFactory kFactories[] = {
    {"Local", [](const std::string& location) { return OpenLocalBlobStore(location); }},
};

class BlobStoreContractTest : public ::testing::TestWithParam<BlobStoreFactory> {
 protected:
  void SetUp() override {
    auto opened = GetParam().open(dir_.path());
    ASSERT_TRUE(opened.ok()) << opened.status();
    blobs_ = std::move(*opened);
  }

  TempDir dir_;
  std::unique_ptr<BlobStore> blobs_;
};

TEST_P(BlobStoreContractTest, PutReturnsTheContentAddressAndGetReturnsTheBytes) {
  std::string data = "raw log\n";
  data.push_back('\0');
  data += "binary \xff tail";
  ASSERT_OK_AND_ASSIGN(std::string key, blobs_->Put(data));
  EXPECT_EQ(key, "sha256:" + Sha256Hex(data));
  EXPECT_TRUE(IsValidBlobKey(key));
  ASSERT_OK_AND_ASSIGN(std::string back, blobs_->Get(key, 1 << 20));
  EXPECT_EQ(back, data);
  EXPECT_EQ(blobs_->Size(key).value_or(0), data.size());
  ASSERT_OK_AND_ASSIGN(std::string again, blobs_->Put(data));
  EXPECT_EQ(again, key);

  ASSERT_OK_AND_ASSIGN(std::string empty, blobs_->Put(""));
  EXPECT_EQ(blobs_->Get(empty, 0).value_or("x"), "");
}

TEST_P(BlobStoreContractTest, PutFromFdStreamsAndEnforcesTheLimit) {
  TempDir src;
  std::string big;
  for (int i = 0; big.size() < (3u << 20) + 17; ++i) big += "line " + std::to_string(i) + "\n";
  std::string path = src.path() + "/big";
  ASSERT_OK(WriteFileAtomic(path, big));
  {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    ASSERT_OK_AND_ASSIGN(std::string key, blobs_->PutFromFd(fd.get(), 4 << 20));
    EXPECT_EQ(key, "sha256:" + Sha256Hex(big));
    EXPECT_EQ(blobs_->Get(key, 4 << 20).value_or(""), big);
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  auto too_big = blobs_->PutFromFd(fd.get(), 1 << 20);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  auto limited = blobs_->Get("sha256:" + Sha256Hex(big), 1 << 20);
  EXPECT_EQ(limited.status().code(), absl::StatusCode::kResourceExhausted);
}

// Keys name files or objects: nothing but a well-formed digest reaches a path.
TEST_P(BlobStoreContractTest, MalformedKeysAreRefused) {
  ASSERT_OK_AND_ASSIGN(std::string key, blobs_->Put("x"));
  std::string hex = key.substr(7);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  for (const std::string& bad :
       {std::string("../../etc/passwd"), "sha256:../" + hex.substr(3), "sha256:" + upper,
        "sha256:" + hex + "0", "sha256:" + hex.substr(1), "md5:" + hex, hex, std::string(""),
        "sha256:" + hex.substr(0, 63) + "/"}) {
    EXPECT_EQ(blobs_->Get(bad, 100).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(blobs_->Size(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(blobs_->Delete(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_P(BlobStoreContractTest, MissingBlobsAreNotFoundAndDeleteIsIdempotent) {
  ASSERT_OK_AND_ASSIGN(std::string key, blobs_->Put("to be deleted"));
  ASSERT_OK(blobs_->Delete(key));
  EXPECT_EQ(blobs_->Get(key, 100).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(blobs_->Size(key).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(blobs_->Delete(key).ok());
}

TEST_P(BlobStoreContractTest, ConcurrentPutsOfTheSameAndOtherContent) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<std::string> same_keys;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto same = blobs_->Put(std::string(10000, 's'));
        auto own = blobs_->Put("thread " + std::to_string(t) + " item " + std::to_string(i));
        ASSERT_TRUE(same.ok() && own.ok());
        std::lock_guard lock(mu);
        same_keys.insert(*same);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(same_keys.size(), 1u);
  EXPECT_EQ(blobs_->Get(*same_keys.begin(), 1 << 20).value_or(""), std::string(10000, 's'));
  EXPECT_EQ(blobs_->Get("sha256:" + Sha256Hex("thread 7 item 19"), 100).value_or(""),
            "thread 7 item 19");
}

INSTANTIATE_TEST_SUITE_P(BlobStores, BlobStoreContractTest, ::testing::ValuesIn(kFactories),
                         [](const auto& param_info) { return param_info.param.name; });

// --- The local directory ----------------------------------------------------------------------

TEST(LocalBlobStoreTest, FilesArePrivateAndNoTempFileIsLeft) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(auto blobs, OpenLocalBlobStore(tmp.path() + "/blobs"));
  ASSERT_OK_AND_ASSIGN(std::string key, blobs->Put("secret-free artifact"));
  std::string hex = key.substr(7);
  struct stat st;
  ASSERT_EQ(::stat((tmp.path() + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((tmp.path() + "/blobs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  UniqueFd fd(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(blobs->PutFromFd(fd.get(), 1000).ok());  // endless: refused at the limit
  EXPECT_EQ(::rmdir((tmp.path() + "/blobs/tmp").c_str()), 0) << "temp files left behind";
}

// Someone edits a stored blob on disk: reading it is DataLoss, never the edited bytes.
TEST(LocalBlobStoreTest, TamperedContentIsDataLoss) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(auto blobs, OpenLocalBlobStore(tmp.path()));
  ASSERT_OK_AND_ASSIGN(std::string key, blobs->Put("original"));
  std::string hex = key.substr(7);
  ASSERT_OK(
      WriteFileAtomic(tmp.path() + "/sha256/" + hex.substr(0, 2) + "/" + hex, "modified", 0600));
  auto got = blobs->Get(key, 100);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("no longer matches"));
}

TEST(LocalBlobStoreTest, OpenRemovesOnlyStaleTempFiles) {
  TempDir tmp;
  ASSERT_OK(OpenLocalBlobStore(tmp.path()).status());
  std::string stale = tmp.path() + "/tmp/crashed-writer";
  std::string fresh = tmp.path() + "/tmp/live-writer";
  ASSERT_OK(WriteFileAtomic(stale, "partial"));
  ASSERT_OK(WriteFileAtomic(fresh, "partial"));
  struct timespec old_times[2] = {{.tv_sec = ::time(nullptr) - 7200, .tv_nsec = 0},
                                  {.tv_sec = ::time(nullptr) - 7200, .tv_nsec = 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), old_times, 0), 0);
  ASSERT_OK(OpenLocalBlobStore(tmp.path()).status());
  EXPECT_NE(::access(stale.c_str(), F_OK), 0);
  EXPECT_EQ(::access(fresh.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace airlock::store
