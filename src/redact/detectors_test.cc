// Each format detector against real-looking samples, and near misses that must stay.
//
// Samples are made up (random bodies in the real formats). Their prefixes are split from their
// bodies (Tok("ghp_", "u8jz...")) so that secret scanners do not flag this file.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "re2/re2.h"
#include "redact/internal/detectors.h"
#include "redact/internal/test_helpers.h"
#include "redact/redactor.h"

namespace airlock {
namespace {

using redact_testing::Tok;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const Redactor& Detectors() {
  static const Redactor* redactor = new Redactor(*Redactor::Create({}));
  return *redactor;
}

std::string Redact(std::string_view text) { return Detectors().Redact(text); }

// The kinds found in `text`, in order.
std::vector<std::string> Kinds(std::string_view text) {
  std::vector<std::string> kinds;
  for (const Finding& f : Detectors().Scan(text)) kinds.push_back(ToString(f.kind));
  return kinds;
}

// `text` has exactly one finding, of `kind`, covering exactly `secret`.
void ExpectOnly(std::string_view text, std::string_view secret, SecretKind kind) {
  SCOPED_TRACE(text);
  std::vector<Finding> findings = Detectors().Scan(text);
  ASSERT_EQ(findings.size(), 1u) << testing::PrintToString(Kinds(text));
  EXPECT_EQ(findings[0].kind, kind);
  EXPECT_EQ(text.substr(findings[0].offset, findings[0].length), secret);
}

void ExpectNothing(std::string_view text) {
  EXPECT_THAT(Kinds(text), IsEmpty()) << text;
  EXPECT_EQ(Redact(text), text);
}

TEST(DetectorsTest, AwsAccessKeyIds) {
  const std::string key = Tok("AKIA", "IOSFODNN7EXAMPLE");
  ExpectOnly("export AWS_ACCESS_KEY_ID=" + key + "\n", key, SecretKind::kAwsAccessKey);
  ExpectOnly(Tok("\"AccessKeyId\": \"ASIA", "Y34FZKBOKMUTVV7A\","), Tok("ASIA", "Y34FZKBOKMUTVV7A"),
             SecretKind::kAwsAccessKey);
  ExpectOnly(key, key, SecretKind::kAwsAccessKey);
  EXPECT_EQ(Redact("id=" + key + " ok"), "id=[REDACTED:aws_access_key] ok");
}

TEST(DetectorsTest, AwsAccessKeyNearMisses) {
  ExpectNothing(Tok("AKIA", "IOSFODNN7EXAMPL"));    // 19 characters
  ExpectNothing(Tok("AKIA", "IOSFODNN7EXAMPLEX"));  // 21 characters
  ExpectNothing(Tok("XAKIA", "IOSFODNN7EXAMPLE"));  // inside a longer word
  ExpectNothing(Tok("akia", "iosfodnn7example"));   // key ids are upper case
  ExpectNothing("AKIA_ROTATION_POLICY_V2");
}

TEST(DetectorsTest, AwsSecretKeys) {
  const std::string secret = Tok("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY");
  ExpectOnly("aws_secret_access_key = " + secret + "\n", secret, SecretKind::kAwsSecretKey);
  ExpectOnly("AWS_SECRET_ACCESS_KEY=" + secret, secret, SecretKind::kAwsSecretKey);
  ExpectOnly("    \"SecretAccessKey\": \"" + secret + "\",", secret, SecretKind::kAwsSecretKey);
  ExpectOnly("aws.secret: '" + secret + "'", secret, SecretKind::kAwsSecretKey);
}

TEST(DetectorsTest, AwsSecretKeyNearMisses) {
  // 40 base64 characters with no aws secret key name before them.
  ExpectNothing(Tok("IXAAjlsHUqJoUD+/Ydua/", "5ZMs1SWOpQaPRYpzbLG\n"));
  // A git sha is 40 hex characters.
  ExpectNothing("commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: A <a@b.c>\n");
  // 39 characters: not an AWS secret key, but still a high-entropy credential.
  EXPECT_THAT(Kinds(Tok("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKE")),
              ElementsAre("credential"));
  // `aws configure list` masks the key.
  ExpectNothing("secret_key     ****************EKEY shared-credentials-file");
}

TEST(DetectorsTest, GithubTokens) {
  for (const std::string& token :
       {Tok("ghp_", "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8d"),
        Tok("gho_", "KLzdocJ2isAjIhKtJ0RlgLKOmxgJTeKdNnFR"),
        Tok("ghs_", "KLzdocJ2isAjIhKtJ0RlgLKOmxgJTeKdNnFR"),
        Tok("github_pat_",
            "IBXuDL7DxtpYlSXpfKtHF4_"
            "vUCsMehGAkWvj7FAc9QeWJKY40uvSwMFLZDe1f8rESQedUStPKR0CsTy4Qw")}) {
    ExpectOnly("remote: https://x-access-token@github.com " + token + " ", token,
               SecretKind::kGithubToken);
    ExpectOnly("GITHUB_TOKEN=" + token, token, SecretKind::kGithubToken);
  }
}

TEST(DetectorsTest, GithubTokenNearMisses) {
  ExpectNothing(Tok("ghp_", "short1234"));
  ExpectNothing(Tok("ghx_", "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8d"));
  ExpectNothing(Tok("myghp_", "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8d"));
  ExpectNothing("github_pat_ is the prefix of fine-grained tokens");
}

TEST(DetectorsTest, GitlabTokens) {
  for (const std::string& token :
       {Tok("glpat-", "c7Tvo-hBKqFYY-kv5ZJr"), Tok("glrt-", "0B3JrTAwR4y9ojfljoQo"),
        Tok("GR1348941", "aF1LlqsajAIxNKu8iS2G")}) {
    ExpectOnly("token: " + token + "\n", token, SecretKind::kGitlabToken);
  }
}

TEST(DetectorsTest, GitlabTokenNearMisses) {
  ExpectNothing(Tok("glpat-", "tooshort"));
  ExpectNothing("see the glpat- prefix in the GitLab docs");
  ExpectNothing(Tok("xglpat-", "c7Tvo-hBKqFYY-kv5ZJr"));
}

TEST(DetectorsTest, SlackTokensAndWebhooks) {
  const std::string bot = Tok("xoxb-", "90786666176-0313721590109-jIg8xNbe3nNyjOq9wMxEhh2F");
  ExpectOnly("SLACK_BOT=" + bot, bot, SecretKind::kSlackToken);
  const std::string app =
      Tok("xapp-", "1-A0777412154-7280385280841-8b5b7a767c76fb008f86bebb2737f6a6");
  ExpectOnly(app, app, SecretKind::kSlackToken);
  ExpectOnly(Tok("curl -X POST https://hooks.slack.com/services/",
                 "T0B1C2D3E/B4F5G6H7I/abcDEF123ghiJKL456mnoPQR9"),
             "T0B1C2D3E/B4F5G6H7I/abcDEF123ghiJKL456mnoPQR9", SecretKind::kSlackWebhook);
}

TEST(DetectorsTest, SlackNearMisses) {
  ExpectNothing("xoxo-hugs-and-kisses-forever");
  ExpectNothing(Tok("xoxb-", "not-a-token-at-all"));
  ExpectNothing("https://hooks.slack.com/services/");
  ExpectNothing("https://api.slack.com/apps");
}

TEST(DetectorsTest, LlmAndCloudApiKeys) {
  const std::string anthropic =
      Tok("sk-ant-",
          "api03-3yBdGBLEPH1qhT61qtc4xatws8phP9nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7CmY_"
          "uCu3ZR1zTOlUcR64cXQLAA");
  ExpectOnly("x-api-key: " + anthropic, anthropic, SecretKind::kLlmApiKey);
  const std::string openai = Tok("sk-", "proj-ioDnkHIfxIq2HZt-PlJhx2jIclHkCiHp6bR1IqfEouHgxzNN");
  ExpectOnly("OPENAI=" + openai + ";", openai, SecretKind::kLlmApiKey);
  const std::string legacy = Tok("sk-", "HWnsCGRlrwZbqcabUGJmGEp7CgQ0PBQFI14zGtSnovm14TUO");
  ExpectOnly(legacy, legacy, SecretKind::kLlmApiKey);
  const std::string google = Tok("AIza", "rZSgqbjG3uhkWKFLf6xuI5aHUQPFeNBTxaQ");
  ExpectOnly("key=" + google + "&q=1", google, SecretKind::kGoogleApiKey);
  const std::string stripe = Tok("sk_live_", "yfErGPmpGXafq0fjzLczbttO");
  ExpectOnly(stripe, stripe, SecretKind::kStripeKey);
  const std::string stripe_test = Tok("rk_test_", "ofL9H2WjQ5TY4MyWuUFjsUNP");
  ExpectOnly(stripe_test, stripe_test, SecretKind::kStripeKey);
  const std::string npm = Tok("npm_", "jc01T5GOBUSZGi6HWGK10Zb0RLZ5TR9SPofb");
  ExpectOnly("//registry.npmjs.org/:_authToken " + npm, npm, SecretKind::kNpmToken);
  const std::string pypi =
      Tok("pypi-", "AgEIcHlwaS5vcmcfrUnW5gcF_Ha6ili8GjHEAD6-Wj9KfzjsQGMrb9h_ImB_LK777pzNk8cL6j5");
  ExpectOnly(pypi, pypi, SecretKind::kPypiToken);
}

TEST(DetectorsTest, ApiKeyNearMisses) {
  ExpectNothing("sk-this-is-a-very-long-kebab-case-name-of-a-thing");
  ExpectNothing(Tok("task-", "HWnsCGRlrwZbqcabUGJmGEp7CgQ0PBQFI14zGtSnovm14TUO"));
  ExpectNothing(Tok("AIza", "tooShort"));
  ExpectNothing(Tok("npm_", "config_registry"));
  ExpectNothing("pip install pypi-simple");
}

TEST(DetectorsTest, Jwts) {
  const std::string jwt = Tok("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.",
                              "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwi"
                              "aWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c");
  ExpectOnly("id_token=" + jwt + "\n", jwt, SecretKind::kJwt);
  EXPECT_EQ(Redact("Authorization: Bearer " + jwt), "Authorization: Bearer [REDACTED:jwt]");
  // Unsigned (alg none) tokens are still bearer tokens.
  const std::string unsigned_jwt = Tok("eyJhbGciOiJub25lIn0.", "eyJzdWIiOiJhZG1pbiJ9.");
  ExpectOnly(unsigned_jwt + " ", unsigned_jwt, SecretKind::kJwt);
}

TEST(DetectorsTest, JwtNearMisses) {
  ExpectNothing("header eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9 alone");
  ExpectNothing("eyJ.eyJ.x");
  ExpectNothing("version 1.2.3.4-eyJ");
}

std::string FakeKeyBody(int lines) {
  std::string body;
  const std::string line = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun";
  for (int i = 0; i < lines; ++i) body += line + "\n";
  return body;
}

TEST(DetectorsTest, PrivateKeys) {
  for (const std::string type : {"RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "DSA ", ""}) {
    const std::string block = "-----BEGIN " + type + "PRIVATE KEY-----\n" + FakeKeyBody(5) +
                              "-----END " + type + "PRIVATE KEY-----";
    ExpectOnly("key:\n" + block + "\nnext line\n", block, SecretKind::kPrivateKey);
    EXPECT_EQ(Redact("key:\n" + block + "\nnext line\n"),
              "key:\n[REDACTED:private_key]\nnext line\n");
  }
  const std::string pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + FakeKeyBody(3) +
                          "=Ab12\n-----END PGP PRIVATE KEY BLOCK-----";
  ExpectOnly(pgp, pgp, SecretKind::kPrivateKey);
  // A service account JSON file keeps the key on one line with \n escapes.
  const std::string json_key =
      "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE "
      "KEY-----\\n";
  EXPECT_EQ(Redact("\"key\": \"" + json_key + "\", \"client_email\": \"a@b.iam\"}"),
            "\"key\": \"[REDACTED:private_key]\\n\", \"client_email\": \"a@b.iam\"}");
  // Under a "private_key" name the whole quoted value is also a credential, which starts first.
  EXPECT_EQ(Redact("{\"private_key\": \"" + json_key + "\"}"),
            "{\"private_key\": \"[REDACTED:credential]\"}");
}

TEST(DetectorsTest, PrivateKeyWithoutEndIsRedactedToTheEnd) {
  const std::string text =
      "cat id_rsa\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + FakeKeyBody(4) + "(truncated)";
  EXPECT_EQ(Redact(text), "cat id_rsa\n[REDACTED:private_key]");
}

TEST(DetectorsTest, PublicKeysAndCertificatesStay) {
  ExpectNothing("-----BEGIN PUBLIC KEY-----\n" + FakeKeyBody(3) + "-----END PUBLIC KEY-----\n");
  ExpectNothing("-----BEGIN CERTIFICATE-----\n" + FakeKeyBody(3) + "-----END CERTIFICATE-----\n");
  ExpectNothing("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ7x0G7Z0Wm1RkS user@host\n");
}

TEST(DetectorsTest, AuthorizationHeaders) {
  ExpectOnly("> Authorization: Basic dXNlcjpQNHNzdzByZCE=\r\n",
             "dXNlcjpQNHNzdzByZCE=", SecretKind::kAuthorization);
  ExpectOnly("-H 'authorization: Bearer ya29.a0AfH6SMBxQ7-kLk9'", "ya29.a0AfH6SMBxQ7-kLk9",
             SecretKind::kAuthorization);
  ExpectOnly("Proxy-Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "YWxhZGRpbjpvcGVuc2VzYW1l",
             SecretKind::kAuthorization);
}

TEST(DetectorsTest, AuthorizationPlaceholdersStay) {
  ExpectNothing("-H \"Authorization: Bearer $TOKEN\"");
  ExpectNothing("Authorization: Bearer <token>");
  ExpectNothing("Authorization: Bearer ********");
  ExpectNothing("the Authorization header is missing");
}

TEST(DetectorsTest, UrlPasswords) {
  ExpectOnly("DATABASE_URL=postgres://app:Zq8vR2pLw@db:5432/app", "Zq8vR2pLw",
             SecretKind::kUrlPassword);
  ExpectOnly("Looking in indexes: https://__token__:abc123XYZ@pypi.example.com/simple", "abc123XYZ",
             SecretKind::kUrlPassword);
  ExpectOnly("redis://:s3cretPw@cache:6379/0", "s3cretPw", SecretKind::kUrlPassword);
}

TEST(DetectorsTest, UrlNearMisses) {
  ExpectNothing("git@github.com:org/repo.git");
  ExpectNothing("https://example.com:8443/path?q=1");
  ExpectNothing("https://${USER}:${PASS}@host/");
  ExpectNothing("http://user:****@proxy:3128");
  ExpectNothing("mailto:someone@example.com");
}

TEST(DetectorsTest, CredentialAssignments) {
  ExpectOnly("password=Xk9#mQ2vLp", "Xk9#mQ2vLp", SecretKind::kCredential);
  ExpectOnly("DB_PASSWORD='s3cr3t-Pa55w0rd'", "s3cr3t-Pa55w0rd", SecretKind::kCredential);
  ExpectOnly("{\"password\": \"correct horse battery staple\"}", "correct horse battery staple",
             SecretKind::kCredential);
  ExpectOnly("api_key: 3f9a8c2e1b7d4f60", "3f9a8c2e1b7d4f60", SecretKind::kCredential);
  ExpectOnly("--client-secret=Qm9vT2xlYW5Ub2tlbjEy", "Qm9vT2xlYW5Ub2tlbjEy",
             SecretKind::kCredential);
  ExpectOnly("SECRET_KEY = \"django-insecure-7h#x@k2!pq\"", "django-insecure-7h#x@k2!pq",
             SecretKind::kCredential);
  ExpectOnly("app.auth_token => 9dK3mZq7Lw2x", "9dK3mZq7Lw2x", SecretKind::kCredential);
  ExpectOnly("DB_PWD=W7x!pQ4zK", "W7x!pQ4zK", SecretKind::kCredential);
  EXPECT_EQ(Redact("?access_token=Zx81Kq0pLm2n&page=2"),
            "?access_token=[REDACTED:credential]&page=2");
}

TEST(DetectorsTest, CredentialNearMissesStay) {
  ExpectNothing("password=changeme");  // low entropy: a placeholder, not a secret
  ExpectNothing("password: <redacted>");
  ExpectNothing("password=********");
  ExpectNothing("token: ${GITHUB_TOKEN}");
  ExpectNothing("api_key: {{ .Values.apiKey }}");
  ExpectNothing("password = %(db_password)s");
  ExpectNothing("max_tokens=4096");
  ExpectNothing("PWD=/home/user/project/build\nOLDPWD=/home/user/project");
  ExpectNothing("Password for 'https://github.com': ");
  ExpectNothing("secret_name: my-app");
  ExpectNothing("token_count=12345678");
  ExpectNothing("password: incorrect");
  ExpectNothing("tokenizer=sentencepiece-unigram");
  ExpectNothing("password=hunter22");  // weak real passwords need registering explicitly
}

TEST(DetectorsTest, IdentifiersStay) {
  ExpectNothing("request_id=123e4567-e89b-12d3-a456-426614174000");
  ExpectNothing("123e4567-e89b-12d3-a456-426614174000");
  ExpectNothing("HEAD is now at 3f786850e387550fdab836ed7e6dc881de23001b fix: stuff");
  ExpectNothing("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ExpectNothing("src/main.cc:42:7: error: expected ';' before '}' token");
  ExpectNothing("npm ERR! 404 Not Found - GET https://registry.npmjs.org/left-padd");
}

TEST(DetectorsTest, OverlappingFindings) {
  // One span, two detectors: one finding, of the more specific kind.
  const std::string token = Tok("glpat-", "c7Tvo-hBKqFYY-kv5ZJr");
  const std::string url = "https://oauth2:" + token + "@gitlab.com/group/repo.git";
  EXPECT_THAT(Kinds(url), ElementsAre("gitlab_token"));
  EXPECT_EQ(Redact(url), "https://oauth2:[REDACTED:gitlab_token]@gitlab.com/group/repo.git");
  const std::string jwt =
      Tok("eyJhbGciOiJIUzI1NiJ9.", "eyJzdWIiOiJhZG1pbiIsImV4cCI6MX0.c2lnbmF0dXJlMTIz");
  EXPECT_THAT(Kinds("token=" + jwt), ElementsAre("jwt"));
  EXPECT_EQ(Redact("token=" + jwt), "token=[REDACTED:jwt]");
  // Nested spans: both are findings, and they become one marker.
  const std::string nested = Tok("secret=abc/AKIA", "IOSFODNN7EXAMPLE/xyz done");
  std::vector<Finding> findings = Detectors().Scan(nested);
  EXPECT_THAT(findings, ElementsAre(Finding{SecretKind::kCredential, 7, 28},
                                    Finding{SecretKind::kAwsAccessKey, 11, 20}));
  EXPECT_EQ(Redact(nested), "secret=[REDACTED:credential] done");
}

TEST(DetectorsTest, SeveralSecretsOnOneLine) {
  const std::string a = Tok("AKIA", "IOSFODNN7EXAMPLE");
  const std::string b = Tok("ASIA", "Y34FZKBOKMUTVV7A");
  EXPECT_EQ(Redact(a + " " + b + "," + a),
            "[REDACTED:aws_access_key] [REDACTED:aws_access_key],"
            "[REDACTED:aws_access_key]");
}

TEST(DetectorsTest, BinaryInput) {
  std::string text;
  for (int i = 0; i < 4096; ++i) text.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  text.append(std::string("\0\xff", 2) + Tok("AKIA", "IOSFODNN7EXAMPLE") +
              std::string("\x80\0", 2));
  for (int i = 0; i < 4096; ++i) text.push_back(static_cast<char>((i * 57 + 3) & 0xff));
  std::vector<Finding> findings = Detectors().Scan(text);
  ASSERT_FALSE(findings.empty());
  bool found = false;
  for (const Finding& f : findings) {
    found |= f.kind == SecretKind::kAwsAccessKey && f.offset == 4098 && f.length == 20;
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(Redact(text).find("IOSFODNN7"), std::string::npos);
}

TEST(DetectorsTest, EntropyPolicy) {
  using redact_internal::LooksSecret;
  EXPECT_NEAR(redact_internal::ShannonEntropy("aaaa"), 0.0, 1e-9);
  EXPECT_NEAR(redact_internal::ShannonEntropy("abcd"), 2.0, 1e-9);
  EXPECT_FALSE(LooksSecret("changeme"));
  EXPECT_FALSE(LooksSecret("password"));
  EXPECT_FALSE(LooksSecret("12345678"));
  EXPECT_FALSE(LooksSecret("Xk9#mQ2"));  // too short
  EXPECT_FALSE(LooksSecret("${DB_PASSWORD}"));
  EXPECT_FALSE(LooksSecret("xxxxxxxxxxxx"));
  EXPECT_TRUE(LooksSecret("Xk9#mQ2vLp"));
  EXPECT_TRUE(LooksSecret("3f9a8c2e1b7d4f60"));
  EXPECT_TRUE(LooksSecret("kxqzvbnmwplrtyhgfdsa"));  // one class, but long and random
  EXPECT_FALSE(LooksSecret("documentation"));
}

TEST(DetectorsTest, EncodedFormsOfExplicitValues) {
  using redact_internal::EncodedForms;
  // "user:P4ssw0rd!" in base64 is "dXNlcjpQNHNzdzByZCE=": the value-only part of the
  // alignment at offset 5 must be one of the forms.
  std::vector<std::string> forms = EncodedForms("P4ssw0rd!", 8);
  EXPECT_THAT(forms, testing::Contains("P4ssw0rd%21"));
  // A host name label comes back lowercased from the proxy.
  EXPECT_THAT(forms, testing::Contains("p4ssw0rd!"));
  bool found = false;
  for (const std::string& f : forms) {
    found |= std::string("dXNlcjpQNHNzdzByZCE=").find(f) != std::string::npos && f.size() >= 8;
  }
  EXPECT_TRUE(found) << testing::PrintToString(forms);
  // A value with only unreserved characters has no separate percent-encoded form.
  for (const std::string& f : EncodedForms("abcdefgh", 8)) EXPECT_NE(f, "abcdefgh");
}

// The prefilter's loosened patterns: counted repetitions become + or *, and nothing else changes
// (braces in a class or escaped, and the rest of the pattern, stay). Each detector's loosened form
// compiles and matches every sample its exact form matches (the samples of the tests above go
// through the prefilter first).
TEST(DetectorsTest, LoosePatternsDropOnlyTheCounts) {
  using redact_internal::LoosePattern;
  EXPECT_EQ(LoosePattern("a{16}b{36,}c{0,24}d{2,10}?"), "a+b+c*d+?");
  EXPECT_EQ(LoosePattern("x{0}y{00,3}"), "x*y*");
  EXPECT_EQ(LoosePattern(R"([^(){}\[\]=]{8,}\{3\}[{]{2}[]{]{4})"),
            R"([^(){}\[\]=]+\{3\}[{]+[]{]+)");
  EXPECT_EQ(LoosePattern("a{,3}b{x}c{"), "a{,3}b{x}c{");
  for (const redact_internal::DetectorSpec& spec : redact_internal::DetectorSpecs()) {
    std::string loose = LoosePattern(spec.pattern);
    EXPECT_EQ(LoosePattern(loose), loose) << "a count left in " << loose;
    RE2 re(loose, RE2::Latin1);
    EXPECT_TRUE(re.ok()) << loose;
  }
}

}  // namespace
}  // namespace airlock
