#include "artifact/gate.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::artifact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint32_t kFile = S_IFREG | 0644;

// Sample secrets are written in two parts so that secret scanners do not flag this source.
std::string Tok(std::string_view a, std::string_view b) { return std::string(a) + std::string(b); }
const std::string kAwsKey = Tok("AKIA", "IOSFODNN7EXAMPLE");
const std::string kPemKey = Tok("-----BEGIN RSA ", "PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n") +
                            Tok("-----END RSA ", "PRIVATE KEY-----\n");
const std::string kElf = std::string(
                             "\x7f"
                             "ELF\x02\x01\x01",
                             7) +
                         std::string(2000, '\x01');

Candidate File(std::string path, std::string content, uint32_t mode = kFile) {
  auto data = std::make_shared<std::string>(std::move(content));
  Candidate c;
  c.path = std::move(path);
  c.size = data->size();
  c.mode = mode;
  c.open = [data]() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    return std::make_unique<StringReader>(*data);
  };
  return c;
}

// A candidate whose content must never be read.
Candidate Unreadable(std::string path, uint32_t mode) {
  Candidate c;
  c.path = std::move(path);
  c.size = 10;
  c.mode = mode;
  c.open = []() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    ADD_FAILURE() << "opened a file that must not be read";
    return Internal("must not be opened");
  };
  return c;
}

spec::Artifacts Spec() {
  spec::Artifacts spec;
  spec.paths = {"/sandbox/artifacts", "/sandbox/workspace/dist"};
  spec.binary_threshold_kb = 1;
  spec.allow_binaries = {{"/sandbox/artifacts/bin/*", "the tool this task builds"}};
  return spec;
}

ReleaseGate Gate(spec::Artifacts spec = Spec(), std::vector<std::string> secrets = {},
                 GateOptions options = {}) {
  absl::StatusOr<Redactor> redactor = Redactor::Create(std::move(secrets));
  EXPECT_TRUE(redactor.ok()) << redactor.status();
  absl::StatusOr<ReleaseGate> gate = ReleaseGate::Create(spec, *redactor, options);
  EXPECT_TRUE(gate.ok()) << gate.status();
  return *gate;
}

Collection Inspect(const ReleaseGate& gate, const std::vector<Candidate>& files,
                   ArtifactSink* sink = nullptr) {
  absl::StatusOr<Collection> c = gate.Inspect(files, sink);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Collection{};
}

struct Expect {
  Candidate file;
  Outcome outcome;
  const char* rule;
};

void ExpectVerdicts(const ReleaseGate& gate, const std::vector<Expect>& cases) {
  std::vector<Candidate> files;
  for (const Expect& e : cases) files.push_back(e.file);
  Collection c = Inspect(gate, files);
  ASSERT_EQ(c.files.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].file.path);
    EXPECT_EQ(c.files[i].path, cases[i].file.path);
    EXPECT_EQ(ToString(c.files[i].outcome), std::string(ToString(cases[i].outcome)))
        << c.files[i].rule << ": " << c.files[i].detail;
    EXPECT_EQ(c.files[i].rule, cases[i].rule) << c.files[i].detail;
  }
}

TEST(ReleaseGateTest, EveryRefusalRule) {
  ExpectVerdicts(
      Gate(),
      {
          {File("/sandbox/artifacts/report.txt", "all tests passed\n"), Outcome::kReleased, ""},
          {File("/sandbox/workspace/dist/app.tar.txt", "listing\n"), Outcome::kReleased, ""},
          {Unreadable("/sandbox/artifacts/link", S_IFLNK | 0777), Outcome::kRefused, "symlink"},
          {Unreadable("/sandbox/artifacts/dir", S_IFDIR | 0755), Outcome::kRefused,
           "not-regular-file"},
          {Unreadable("/sandbox/artifacts/fifo", S_IFIFO | 0644), Outcome::kRefused,
           "not-regular-file"},
          {Unreadable("/sandbox/home/.bashrc", kFile), Outcome::kRefused,
           "never-leave/home-directory"},
          {Unreadable("/root/notes", kFile), Outcome::kRefused, "never-leave/home-directory"},
          {Unreadable("/sandbox/artifacts/node_modules/x/index.js", kFile), Outcome::kRefused,
           "never-leave/dependency-cache"},
          {Unreadable("/sandbox/workspace/dist/.venv/lib/x.py", kFile), Outcome::kRefused,
           "never-leave/dependency-cache"},
          {Unreadable("/sandbox/artifacts/app/__pycache__/m.cpython-311.pyc", kFile),
           Outcome::kRefused, "never-leave/dependency-cache"},
          {Unreadable("/sandbox/cache/pip/wheel.whl", kFile), Outcome::kRefused,
           "never-leave/dependency-cache"},
          {Unreadable("/sandbox/artifacts/id_rsa", kFile), Outcome::kRefused,
           "never-leave/private-key"},
          {Unreadable("/sandbox/artifacts/tls/server.key", kFile), Outcome::kRefused,
           "never-leave/private-key"},
          {Unreadable("/sandbox/artifacts/.ssh/known_hosts", kFile), Outcome::kRefused,
           "never-leave/private-key"},
          {File("/sandbox/artifacts/id_ed25519.pub", "ssh-ed25519 AAAAC3Nza user@host\n"),
           Outcome::kReleased, ""},
          {File("/sandbox/artifacts/key.pem", kPemKey), Outcome::kRefused,
           "never-leave/private-key"},
          {File("/sandbox/artifacts/notes.txt", "\n  " + kPemKey), Outcome::kRefused,
           "never-leave/private-key"},
          {File("/sandbox/artifacts/deploy", std::string("openssh-key-v1\0rest", 19)),
           Outcome::kRefused, "never-leave/private-key"},
          {File("/sandbox/artifacts/cert.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n"),
           Outcome::kReleased, ""},
          {Unreadable("/sandbox/artifacts/.env", kFile), Outcome::kRefused, "never-leave/env-file"},
          {Unreadable("/sandbox/artifacts/.env.production", kFile), Outcome::kRefused,
           "never-leave/env-file"},
          {Unreadable("/sandbox/artifacts/prod.env", kFile), Outcome::kRefused,
           "never-leave/env-file"},
          {File("/sandbox/artifacts/.env.example", "API_KEY=\n"), Outcome::kReleased, ""},
          {Unreadable("/sandbox/artifacts/.npmrc", kFile), Outcome::kRefused,
           "never-leave/token-file"},
          {Unreadable("/sandbox/artifacts/.docker/config.json", kFile), Outcome::kRefused,
           "never-leave/token-file"},
          {Unreadable("/sandbox/artifacts/infra/terraform.tfstate", kFile), Outcome::kRefused,
           "never-leave/token-file"},
          {Unreadable("/sandbox/workspace/src/main.py", kFile), Outcome::kRefused,
           "outside-allowed-paths"},
          {Unreadable("/etc/passwd", kFile), Outcome::kRefused, "outside-allowed-paths"},
          {Unreadable("/sandbox/artifacts/../etc/passwd", kFile), Outcome::kRefused,
           "outside-allowed-paths"},
          {Unreadable("sandbox/artifacts/x", kFile), Outcome::kRefused, "outside-allowed-paths"},
          {Unreadable("/sandbox/artifactsx/y", kFile), Outcome::kRefused, "outside-allowed-paths"},
          {File("/sandbox/artifacts/a.out", kElf), Outcome::kRefused, "binary-without-reason"},
          {File("/sandbox/artifacts/bin/tool", kElf), Outcome::kReleased, ""},
          {File("/sandbox/artifacts/small.bin", std::string("\x7f"
                                                            "ELF",
                                                            4)),
           Outcome::kReleased, ""},
          {File("/sandbox/artifacts/chart.png",
                std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16) + std::string(3000, 'x')),
           Outcome::kRefused, "binary-without-reason"},
          {File("/sandbox/artifacts/out.zip", "PK\x03\x04" + std::string(3000, 'z')),
           Outcome::kRefused, "binary-without-reason"},
      });
}

TEST(ReleaseGateTest, VerdictsSayWhy) {
  Collection c = Inspect(
      Gate(),
      {File("/sandbox/artifacts/a.out", kElf), File("/sandbox/artifacts/bin/tool", kElf),
       File("/sandbox/artifacts/.env.local", "X=1"), File("/sandbox/artifacts/ok.txt", "fine\n")});
  ASSERT_EQ(c.files.size(), 4u);
  EXPECT_EQ(c.files[0].detail,
            "ELF executable, 2.0 KiB, over artifacts.binaryThresholdKb (1 KiB) with no "
            "artifacts.allowBinaries entry");
  EXPECT_EQ(c.files[1].binary, "ELF executable");
  EXPECT_EQ(c.files[1].binary_reason, "the tool this task builds");
  EXPECT_EQ(c.files[2].detail, "basename .env.local");
  EXPECT_EQ(c.files[3].sha256, Sha256Hex("fine\n"));
  EXPECT_EQ(c.files[3].bytes, 5u);
  EXPECT_FALSE(c.blocked);
  EXPECT_EQ(c.released_bytes, kElf.size() + 5);
}

TEST(ReleaseGateTest, OneSecretBlocksTheWholeCollection) {
  const std::string log = "line one\nline two\nexport AWS_ACCESS_KEY_ID=" + kAwsKey + "\n";
  Collection c = Inspect(Gate(), {File("/sandbox/artifacts/report.html", "<p>ok</p>\n"),
                                  File("/sandbox/artifacts/build.log", log),
                                  Unreadable("/sandbox/artifacts/.env", kFile),
                                  File("/sandbox/workspace/dist/app.txt", "v1\n")});
  EXPECT_TRUE(c.blocked);
  ASSERT_EQ(c.files.size(), 4u);
  EXPECT_EQ(c.files[0].outcome, Outcome::kWithheld);
  EXPECT_EQ(c.files[1].outcome, Outcome::kQuarantined);
  EXPECT_EQ(c.files[1].rule, "secret-found");
  ASSERT_EQ(c.files[1].hits.size(), 1u);
  EXPECT_EQ(c.files[1].hits[0].detector, "aws_access_key");
  EXPECT_EQ(c.files[1].hits[0].offset, log.find(kAwsKey));
  EXPECT_EQ(c.files[1].hits[0].line, 3u);
  EXPECT_EQ(c.files[1].hits[0].length, kAwsKey.size());
  EXPECT_EQ(c.files[1].detail, "aws_access_key at line 3 (byte 43)");
  EXPECT_EQ(c.files[2].outcome, Outcome::kRefused);
  EXPECT_EQ(c.files[3].outcome, Outcome::kWithheld);

  // The secret itself appears nowhere in what the gate reports.
  const std::string json = ToJson(c).dump();
  const std::string summary = Summary(c);
  EXPECT_THAT(json, Not(HasSubstr(kAwsKey)));
  EXPECT_THAT(summary, Not(HasSubstr(kAwsKey)));
  EXPECT_THAT(json, HasSubstr("\"outcome\":\"quarantined\""));
  EXPECT_THAT(summary, HasSubstr("artifacts: BLOCKED, nothing released: 1 quarantined"));
  EXPECT_THAT(summary, HasSubstr("the run is POLICY_BLOCKED"));
  EXPECT_THAT(summary, HasSubstr("quarantined /sandbox/artifacts/build.log: secret-found "
                                 "(aws_access_key at line 3 (byte 43))"));
  EXPECT_THAT(summary, HasSubstr("refused /sandbox/artifacts/.env: never-leave/env-file"));
}

TEST(ReleaseGateTest, RunSecretsAndEveryDetectorAreUsed) {
  const std::string lease = "lease-value-0123456789";
  ReleaseGate gate = Gate(Spec(), {lease});
  Collection c = Inspect(gate, {File("/sandbox/artifacts/a.txt", "token is " + lease + "\n"),
                                File("/sandbox/artifacts/b.txt", "x\n" + kPemKey),
                                File("/sandbox/artifacts/c.txt",
                                     "auth: " + Tok("ghp_", std::string(36, 'a')) + "\n")});
  ASSERT_EQ(c.files.size(), 3u);
  ASSERT_THAT(c.files[0].hits, Not(IsEmpty()));
  EXPECT_EQ(c.files[0].hits[0].detector, "secret");
  // A key inside a document (not at its start) is a secret found, not a key file.
  ASSERT_THAT(c.files[1].hits, Not(IsEmpty()));
  EXPECT_EQ(c.files[1].hits[0].detector, "private_key");
  EXPECT_EQ(c.files[1].hits[0].line, 2u);
  ASSERT_THAT(c.files[2].hits, Not(IsEmpty()));
  EXPECT_EQ(c.files[2].hits[0].detector, "github_token");
}

TEST(ReleaseGateTest, SecretScanOffReleasesWhatItWouldQuarantine) {
  spec::Artifacts spec = Spec();
  spec.secret_scan = false;
  Collection c = Inspect(Gate(spec), {File("/sandbox/artifacts/a.txt", kAwsKey)});
  EXPECT_FALSE(c.blocked);
  EXPECT_EQ(c.files[0].outcome, Outcome::kReleased);
}

// A reader that returns at most `max` bytes per call, cycling through sizes, so that content
// arrives cut at every possible place.
class Trickle : public ContentReader {
 public:
  Trickle(std::string data, size_t max) : data_(std::move(data)), max_(max) {}
  absl::StatusOr<size_t> Read(std::span<char> buffer) override {
    size_t n = std::min({buffer.size(), data_.size() - pos_, 1 + (calls_++ % max_)});
    std::copy_n(data_.data() + pos_, n, buffer.data());
    pos_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t max_;
  size_t pos_ = 0;
  size_t calls_ = 0;
};

TEST(ReleaseGateTest, FindsSecretsThatStraddleChunkBoundaries) {
  // The gate reads 4 KiB chunks; place the key across the boundary at every offset around it,
  // and feed it through a reader that also cuts at odd places.
  GateOptions options;
  options.chunk_bytes = 4096;
  ReleaseGate gate = Gate(Spec(), {}, options);
  for (size_t at = 4096 - kAwsKey.size() - 2; at <= 4096 + 2; ++at) {
    for (size_t trickle : {size_t{0}, size_t{7}}) {
      SCOPED_TRACE(fmt::format("key at {}, trickle {}", at, trickle));
      std::string text(at, 'a');
      for (size_t i = 80; i < at; i += 81) text[i] = '\n';
      text.back() = ' ';  // the detector wants a word boundary before the key
      text += kAwsKey + " tail\n";
      Candidate file = File("/sandbox/artifacts/log.txt", text);
      if (trickle != 0) {
        file.open = [text, trickle]() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
          return std::make_unique<Trickle>(text, trickle);
        };
      }
      Collection c = Inspect(gate, {file});
      ASSERT_EQ(c.files.size(), 1u);
      ASSERT_EQ(c.files[0].outcome, Outcome::kQuarantined);
      ASSERT_EQ(c.files[0].hits.size(), 1u);
      EXPECT_EQ(c.files[0].hits[0].offset, at);
      EXPECT_EQ(c.files[0].hits[0].line,
                1 + static_cast<uint64_t>(std::count(text.begin(), text.begin() + at, '\n')));
    }
  }
}

// Generates `size` bytes of log lines with `secret` on the line that starts at `secret_line`.
class Generated : public ContentReader {
 public:
  Generated(uint64_t size, uint64_t secret_line, std::string secret)
      : size_(size), secret_line_(secret_line), secret_(std::move(secret)) {}
  absl::StatusOr<size_t> Read(std::span<char> buffer) override {
    max_request_ = std::max(max_request_, buffer.size());
    size_t n = 0;
    while (n < buffer.size() && produced_ < size_) {
      if (line_pos_ == line_.size()) NextLine();
      size_t take = std::min(
          {buffer.size() - n, line_.size() - line_pos_, static_cast<size_t>(size_ - produced_)});
      std::copy_n(line_.data() + line_pos_, take, buffer.data() + n);
      n += take;
      line_pos_ += take;
      produced_ += take;
    }
    return n;
  }
  size_t max_request() const { return max_request_; }
  uint64_t secret_offset() const { return secret_offset_; }

 private:
  void NextLine() {
    ++line_number_;
    line_ = fmt::format("2024-05-01T12:00:00Z INFO request id={} path=/api/v1/items status=200\n",
                        line_number_);
    if (line_number_ == secret_line_) {
      line_ = "export AWS_ACCESS_KEY_ID=" + secret_ + "\n";
      secret_offset_ = produced_ + 25;
    }
    line_pos_ = 0;
  }

  uint64_t size_;
  uint64_t secret_line_;
  std::string secret_;
  uint64_t produced_ = 0;
  uint64_t line_number_ = 0;
  std::string line_;
  size_t line_pos_ = 0;
  size_t max_request_ = 0;
  uint64_t secret_offset_ = 0;
};

int64_t PeakRssKb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(ReleaseGateTest, OneGibFileIsStreamedInBoundedMemory) {
  constexpr uint64_t kSize = uint64_t{1} << 30;
  constexpr uint64_t kSecretLine = 14'000'000;  // near the end (lines are ~75 bytes)
  spec::Artifacts spec = Spec();
  spec.max_size_mb = 2048;
  ReleaseGate gate = Gate(spec);
  // The gate destroys the reader it opened; the test's generator outlives it behind a proxy.
  class Borrowed : public ContentReader {
   public:
    explicit Borrowed(ContentReader* r) : r_(r) {}
    absl::StatusOr<size_t> Read(std::span<char> buffer) override { return r_->Read(buffer); }

   private:
    ContentReader* r_;
  };
  Generated generated(kSize, kSecretLine, kAwsKey);
  Generated* reader = &generated;
  Candidate file;
  file.path = "/sandbox/artifacts/huge.log";
  file.size = kSize;
  file.mode = kFile;
  file.open = [&]() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    return std::unique_ptr<ContentReader>(new Borrowed(&generated));
  };
  const int64_t rss_before = PeakRssKb();
  Collection c = Inspect(gate, {file});
  const int64_t rss_growth_kb = PeakRssKb() - rss_before;
  ASSERT_EQ(c.files.size(), 1u);
  EXPECT_EQ(c.files[0].outcome, Outcome::kQuarantined);
  ASSERT_EQ(c.files[0].hits.size(), 1u);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(c.files[0].hits[0].offset, reader->secret_offset());
  EXPECT_EQ(c.files[0].hits[0].line, kSecretLine);
  EXPECT_EQ(c.files[0].bytes, kSize);
  EXPECT_LE(reader->max_request(), GateOptions{}.chunk_bytes);
  // Loading the file whole would add 1 GiB; streaming adds a few windows. (Not under ASan: its
  // quarantine keeps freed chunks resident, up to 256 MiB by default.)
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(rss_growth_kb, 64 * 1024) << "peak RSS grew by " << rss_growth_kb << " KiB";
#else
  (void)rss_growth_kb;
#endif
}

TEST(ReleaseGateTest, SizeCapsTheFileAndTheCollection) {
  spec::Artifacts spec = Spec();
  spec.max_size_mb = 1;
  const std::string third(400 << 10, 'x');
  Candidate liar = File("/sandbox/artifacts/grows.txt", std::string(2 << 20, 'y'));
  liar.size = 10;  // listed small, but grew before it was read
  Collection c = Inspect(
      Gate(spec),
      {File("/sandbox/artifacts/a.txt", third), File("/sandbox/artifacts/b.txt", third),
       File("/sandbox/artifacts/c.txt", third), File("/sandbox/artifacts/tiny.txt", "t\n"), liar});
  ASSERT_EQ(c.files.size(), 5u);
  EXPECT_EQ(c.files[0].outcome, Outcome::kReleased);
  EXPECT_EQ(c.files[1].outcome, Outcome::kReleased);
  EXPECT_EQ(c.files[2].rule, "size-cap");
  EXPECT_EQ(c.files[2].detail,
            "400.0 KiB would bring the collection past artifacts.maxSizeMb (1 MiB)");
  EXPECT_EQ(c.files[3].outcome, Outcome::kReleased);
  EXPECT_EQ(c.files[4].rule, "size-cap");
  EXPECT_THAT(c.files[4].detail, HasSubstr("grew past"));
  EXPECT_EQ(c.released_bytes, 2 * third.size() + 2);

  Candidate big = Unreadable("/sandbox/artifacts/big.bin", kFile);
  big.size = 3 << 20;
  c = Inspect(Gate(spec), {big});
  EXPECT_EQ(c.files[0].detail, "3.0 MiB, over artifacts.maxSizeMb (1 MiB)");
}

// Records what the gate hands to the sink.
class RecordingSink : public ArtifactSink {
 public:
  absl::Status Begin(const Candidate& file) override {
    events.push_back("begin " + file.path);
    current.clear();
    return absl::OkStatus();
  }
  absl::Status Write(std::string_view chunk) override {
    current.append(chunk);
    if (fail_after > 0 && current.size() >= fail_after) return Internal("disk full");
    return absl::OkStatus();
  }
  absl::Status End(const FileVerdict& verdict) override {
    events.push_back(
        fmt::format("end {} {} {}", verdict.path, ToString(verdict.outcome), current.size()));
    if (verdict.outcome == Outcome::kReleased) staged[verdict.path] = current;
    return absl::OkStatus();
  }
  std::vector<std::string> events;
  std::map<std::string, std::string> staged;
  std::string current;
  size_t fail_after = 0;
};

TEST(ReleaseGateTest, SinkGetsExactlyTheBytesThatWereScanned) {
  const std::string body(200000, 'b');
  RecordingSink sink;
  Collection c = Inspect(Gate(),
                         {File("/sandbox/artifacts/a.txt", body),
                          Unreadable("/sandbox/artifacts/link", S_IFLNK | 0777),
                          File("/sandbox/artifacts/k.txt", "key " + kAwsKey)},
                         &sink);
  EXPECT_THAT(sink.events, ElementsAre("begin /sandbox/artifacts/a.txt",
                                       "end /sandbox/artifacts/a.txt "
                                       "released 200000",
                                       "begin /sandbox/artifacts/k.txt",
                                       "end /sandbox/artifacts/k.txt quarantined 24"));
  EXPECT_EQ(sink.staged["/sandbox/artifacts/a.txt"], body);
  EXPECT_TRUE(c.blocked);  // the daemon must then drop what it staged
}

TEST(ReleaseGateTest, ReadAndSinkErrorsFailTheCollection) {
  Candidate broken;
  broken.path = "/sandbox/artifacts/x.txt";
  broken.mode = kFile;
  broken.open = []() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    return ErrnoStatus(EIO, "openat2");
  };
  absl::StatusOr<Collection> c = Gate().Inspect({broken});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "inspect artifact /sandbox/artifacts/x.txt: open: openat2: Input/output error");

  RecordingSink sink;
  sink.fail_after = 1;
  c = Gate().Inspect({File("/sandbox/artifacts/y.txt", "data")}, &sink);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "inspect artifact /sandbox/artifacts/y.txt: artifact sink: disk full");
}

TEST(ReleaseGateTest, CreateChecksTheSpec) {
  absl::StatusOr<Redactor> redactor = Redactor::Create({});
  ASSERT_TRUE(redactor.ok());
  spec::Artifacts spec = Spec();
  spec.allow_binaries = {{"relative/*", "x"}};
  absl::StatusOr<ReleaseGate> gate = ReleaseGate::Create(spec, *redactor);
  ASSERT_FALSE(gate.ok());
  EXPECT_EQ(gate.status().message(),
            "artifacts.allowBinaries[0].path: \"relative/*\" is not an absolute path");
  spec = Spec();
  spec.max_size_mb = 0;
  EXPECT_FALSE(ReleaseGate::Create(spec, *redactor).ok());
}

TEST(ReleaseGateTest, FdReaderReadsAFile) {
  const std::string path = ::testing::TempDir() + "/gate_fd_reader.txt";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("from a file\n", f);
    std::fclose(f);
  }
  Candidate file;
  file.path = "/sandbox/artifacts/f.txt";
  file.size = 12;
  file.mode = kFile;
  file.open = [path]() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "open");
    return std::make_unique<FdReader>(fd);
  };
  Collection c = Inspect(Gate(), {file});
  EXPECT_EQ(c.files[0].outcome, Outcome::kReleased);
  EXPECT_EQ(c.files[0].sha256, Sha256Hex("from a file\n"));
}

}  // namespace
}  // namespace airlock::artifact
