#include "artifact/internal/classify.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::artifact::internal {
namespace {

std::string RuleOf(std::string_view path) {
  std::optional<Refusal> r = NeverLeaveByPath(path);
  return r ? r->rule + " (" + r->detail + ")" : "";
}

TEST(ClassifyTest, NeverLeaveByPath) {
  EXPECT_EQ(RuleOf("/sandbox/home/x"), "never-leave/home-directory (under /sandbox/home)");
  EXPECT_EQ(RuleOf("/sandbox/homework/x"), "");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/node_modules/a/b.js"),
            "never-leave/dependency-cache (under node_modules)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.yarn/cache/x.zip"),
            "never-leave/dependency-cache (under .yarn/cache)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.yarn/releases/yarn.cjs"), "");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.cargo/registry/x"),
            "never-leave/dependency-cache (under .cargo/registry)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/go/pkg/mod/x"),
            "never-leave/dependency-cache (under go/pkg)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/node_modules"), "");  // a file named so: not under it
  EXPECT_EQ(RuleOf("/sandbox/artifacts/ID_RSA"), "never-leave/private-key (basename id_rsa)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/id_rsa.pub"), "");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/cert.p12"), "never-leave/private-key (extension .p12)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.gnupg/pubring.kbx"),
            "never-leave/private-key (under .gnupg)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.env"), "never-leave/env-file (basename .env)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.envrc"), "never-leave/env-file (basename .envrc)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.env.sample"), "");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/environment.md"), "");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.netrc"), "never-leave/token-file (basename .netrc)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/x/.kube/config"),
            "never-leave/token-file (path ends with /.kube/config)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/.aws/credentials"),
            "never-leave/token-file (path ends with /.aws/credentials)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/gcp/service-account-prod.json"),
            "never-leave/token-file (basename service-account-prod.json)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/state.tfstate.backup"),
            "never-leave/token-file (extension .tfstate.backup)");
  EXPECT_EQ(RuleOf("/sandbox/artifacts/report.json"), "");
}

TEST(ClassifyTest, NormalizedPaths) {
  EXPECT_TRUE(IsNormalizedAbsolute("/sandbox/artifacts/a"));
  EXPECT_FALSE(IsNormalizedAbsolute("sandbox/a"));
  EXPECT_FALSE(IsNormalizedAbsolute("/sandbox//a"));
  EXPECT_FALSE(IsNormalizedAbsolute("/sandbox/./a"));
  EXPECT_FALSE(IsNormalizedAbsolute("/sandbox/a/.."));
  EXPECT_FALSE(IsNormalizedAbsolute("/sandbox/a/"));
  EXPECT_FALSE(IsNormalizedAbsolute(std::string_view("/sandbox/a\0b", 12)));
  EXPECT_TRUE(IsAtOrUnder("/sandbox/artifacts/a", "/sandbox/artifacts"));
  EXPECT_FALSE(IsAtOrUnder("/sandbox/artifactsx", "/sandbox/artifacts"));
}

std::string Binary(std::string_view head) { return SniffHead(head).binary; }
std::string Key(std::string_view head) { return SniffHead(head).private_key; }

TEST(ClassifyTest, BinariesByContentNotByName) {
  EXPECT_EQ(Binary(std::string("\x7f"
                               "ELF\x02",
                               5)),
            "ELF executable");
  EXPECT_EQ(Binary("\xCF\xFA\xED\xFE...."), "Mach-O executable");
  EXPECT_EQ(Binary(std::string("\0asm\x01\0\0\0", 8)), "WebAssembly module");
  EXPECT_EQ(Binary("\x1F\x8B\x08"), "gzip archive");
  EXPECT_EQ(Binary("PK\x03\x04rest"), "zip archive");
  EXPECT_EQ(Binary(std::string("\x28\xB5\x2F\xFD", 4)), "zstd archive");
  EXPECT_EQ(Binary("BZh91AY&SYxxxx"), "bzip2 archive");
  EXPECT_EQ(Binary("BZhello world"), "");
  std::string pe(0x80, 'x');
  pe[0] = 'M';
  pe[1] = 'Z';
  pe[0x3c] = 0x40;
  pe[0x3d] = pe[0x3e] = pe[0x3f] = '\0';
  pe.replace(0x40, 4, std::string("PE\0\0", 4));
  EXPECT_EQ(Binary(pe), "PE executable");
  EXPECT_EQ(Binary("MZ is how this text starts"), "");
  EXPECT_EQ(Binary(std::string("text\0more", 9)), "binary data (NUL byte at offset 4)");
  EXPECT_EQ(Binary("plain text\n"), "");
  EXPECT_EQ(Binary(""), "");
}

TEST(ClassifyTest, PrivateKeysByContent) {
  const std::string begin = std::string("-----BEGIN ") + "OPENSSH PRIV" + "ATE KEY-----\nb3Blbn";
  EXPECT_EQ(Key(begin), "PEM private key");
  EXPECT_EQ(Key("\xEF\xBB\xBF\r\n  " + begin), "PEM private key");
  EXPECT_EQ(Key(std::string("-----BEGIN ") + "ENCRYPTED PRIV" + "ATE KEY-----\n"),
            "PEM private key");
  EXPECT_EQ(Key(std::string("-----BEGIN PGP PRIV") + "ATE KEY BLOCK-----\n"), "PGP private key");
  EXPECT_EQ(Key("PuTTY-User-Key-File-3: ssh-ed25519\n"), "PuTTY private key");
  EXPECT_EQ(Key(std::string("openssh-key-v1\0\0\0", 17)), "OpenSSH private key");
  EXPECT_EQ(Key("\xFE\xED\xFE\xED\0\0\0\x02"), "Java keystore");
  EXPECT_EQ(Key("-----BEGIN CERTIFICATE-----\n"), "");
  EXPECT_EQ(Key("-----BEGIN PUBLIC KEY-----\n"), "");
  EXPECT_EQ(Key("notes\n" + begin), "");  // inside a document: the secret scan finds it
}

}  // namespace
}  // namespace airlock::artifact::internal
