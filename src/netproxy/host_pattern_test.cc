#include "netproxy/host_pattern.h"

#include "gtest/gtest.h"

namespace airlock::netproxy {
namespace {

HostName H(std::string_view host) { return *NormalizeHost(host); }

TEST(NormalizeHostTest, LowerCasesAndDropsTrailingDot) {
  EXPECT_EQ(H("Registry.NPMJS.org.").name, "registry.npmjs.org");
  EXPECT_EQ(H("[2001:DB8::1]").name, "2001:db8::1");
  EXPECT_TRUE(H("[2001:db8::1]").ip.has_value());
  EXPECT_TRUE(H("192.0.2.1").ip.has_value());
  EXPECT_FALSE(H("xn--bcher-kva.example").ip.has_value());
}

TEST(NormalizeHostTest, RejectsWhatAResolverCouldReadOtherwise) {
  for (const char* bad : {"", ".", "a..b",
                          "b\xc3\xbc"
                          "cher.example",
                          "a b.com", "a%2eb.com", "user@host.com", "2130706433", "0x7f.1", "127.1",
                          "010.0.0.1", "example.0x10", "host.123", "[not-ip]", "a/b"}) {
    EXPECT_FALSE(NormalizeHost(bad).ok()) << bad;
  }
  EXPECT_FALSE(NormalizeHost(std::string(64, 'a') + ".com").ok());
  EXPECT_FALSE(NormalizeHost(std::string(250, 'a') + ".com").ok());
}

TEST(SplitHostPortTest, Forms) {
  EXPECT_EQ(SplitHostPort("example.com:443")->host, "example.com");
  EXPECT_EQ(*SplitHostPort("example.com:443")->port, 443);
  EXPECT_FALSE(SplitHostPort("example.com")->port.has_value());
  EXPECT_EQ(SplitHostPort("[2001:db8::1]:8443")->host, "[2001:db8::1]");
  EXPECT_EQ(*SplitHostPort("[2001:db8::1]:8443")->port, 8443);
  for (const char* bad : {"h:0", "h:65536", "h:", "h:8x", "2001:db8::1", "[::1", "[::1]x"}) {
    EXPECT_FALSE(SplitHostPort(bad).ok()) << bad;
  }
}

TEST(HostPatternTest, ExactMatchIsCaseInsensitiveOnWebPorts) {
  HostPattern p = *HostPattern::Parse("Registry.npmjs.org");
  EXPECT_TRUE(p.Matches(H("registry.npmjs.org"), 443));
  EXPECT_TRUE(p.Matches(H("REGISTRY.NPMJS.ORG."), 80));
  EXPECT_FALSE(p.Matches(H("registry.npmjs.org"), 8080));
  EXPECT_FALSE(p.Matches(H("evil-registry.npmjs.org"), 443));
  EXPECT_FALSE(p.Matches(H("registry.npmjs.org.evil.com"), 443));
}

TEST(HostPatternTest, WildcardMatchesStrictlyBelowTheSuffix) {
  HostPattern p = *HostPattern::Parse("*.pythonhosted.org");
  EXPECT_TRUE(p.Matches(H("files.pythonhosted.org"), 443));
  EXPECT_TRUE(p.Matches(H("a.b.pythonhosted.org"), 443));
  EXPECT_FALSE(p.Matches(H("pythonhosted.org"), 443));
  EXPECT_FALSE(p.Matches(H("evilpythonhosted.org"), 443));
  EXPECT_FALSE(p.Matches(H("pythonhosted.org.evil.com"), 443));
}

TEST(HostPatternTest, PortIsExact) {
  HostPattern p = *HostPattern::Parse("*.example.com:8443");
  EXPECT_TRUE(p.Matches(H("a.example.com"), 8443));
  EXPECT_FALSE(p.Matches(H("a.example.com"), 443));
  EXPECT_EQ(p.ToString(), "*.example.com:8443");
}

TEST(HostPatternTest, IpLiteralsMatchOnlyThemselves) {
  HostPattern v4 = *HostPattern::Parse("192.0.2.10:8080");
  EXPECT_TRUE(v4.Matches(H("192.0.2.10"), 8080));
  EXPECT_FALSE(v4.Matches(H("192.0.2.11"), 8080));
  HostPattern v6 = *HostPattern::Parse("[2001:db8::a]");
  EXPECT_TRUE(v6.Matches(H("[2001:db8:0::a]"), 443));
  EXPECT_EQ(v6.ToString(), "[2001:db8::a]");
  // A wildcard never matches an IP literal.
  EXPECT_FALSE(HostPattern::Parse("*.2.10").ok());
  EXPECT_FALSE(HostPattern::Parse("*.example.com")->Matches(H("192.0.2.10"), 443));
}

TEST(HostPatternTest, RejectsBadPatterns) {
  for (const char* bad : {"*", "*.", "a.*.com", "*example.com", "https://example.com",
                          "example.com/path", "*.192.0.2.1",
                          "b\xc3\xbc"
                          "cher.de",
                          "h:99999", "*.[::1]"}) {
    EXPECT_FALSE(HostPattern::Parse(bad).ok()) << bad;
  }
}

TEST(HostPatternTest, Coverage) {
  auto P = [](const char* s) { return *HostPattern::Parse(s); };
  EXPECT_TRUE(P("a.example.com").IsCoveredBy(P("*.example.com")));
  EXPECT_TRUE(P("*.a.example.com").IsCoveredBy(P("*.example.com")));
  EXPECT_FALSE(P("*.example.com").IsCoveredBy(P("a.example.com")));
  EXPECT_FALSE(P("example.com").IsCoveredBy(P("*.example.com")));
  EXPECT_TRUE(P("a.example.com:443").IsCoveredBy(P("a.example.com")));
  EXPECT_FALSE(P("a.example.com:8080").IsCoveredBy(P("a.example.com")));
  EXPECT_FALSE(P("a.example.com:80").IsCoveredBy(P("a.example.com")));  // CONNECT to 80
  EXPECT_FALSE(P("a.example.com").IsCoveredBy(P("a.example.com:443")));
  EXPECT_TRUE(P("192.0.2.1").IsCoveredBy(P("192.0.2.1")));
}

}  // namespace
}  // namespace airlock::netproxy
