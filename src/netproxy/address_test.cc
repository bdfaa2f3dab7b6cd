#include "netproxy/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "gtest/gtest.h"

namespace airlock::netproxy {
namespace {

TEST(IpAddressTest, ParsesStrictForms) {
  EXPECT_EQ(IpAddress::Parse("192.0.2.1")->ToString(), "192.0.2.1");
  EXPECT_EQ(IpAddress::Parse("2001:db8::1")->ToString(), "2001:db8::1");
  EXPECT_EQ(IpAddress::Parse("[2001:db8::1]")->ToString(), "2001:db8::1");
  EXPECT_TRUE(IpAddress::Parse("192.0.2.1")->is_v4());
  EXPECT_FALSE(IpAddress::Parse("2001:db8::1")->is_v4());
}

TEST(IpAddressTest, RejectsNonCanonicalIpv4) {
  for (const char* bad : {"0x7f.0.0.1", "127.1", "2130706433", "010.0.0.1", "1.2.3.4.5", "",
                          "[192.0.2.1]", "256.0.0.1", "1.2.3", "example.com"}) {
    EXPECT_FALSE(IpAddress::Parse(bad).has_value()) << bad;
  }
  EXPECT_TRUE(IpAddress::Parse("0.0.0.0").has_value());
  EXPECT_TRUE(IpAddress::Parse("10.0.0.10").has_value());
}

TEST(IpAddressTest, Ipv4MappedIpv6IsTheSameAddress) {
  EXPECT_EQ(*IpAddress::Parse("::ffff:169.254.169.254"), *IpAddress::Parse("169.254.169.254"));
  EXPECT_EQ(*IpAddress::Parse("::ffff:a9fe:a9fe"), *IpAddress::Parse("169.254.169.254"));
  EXPECT_TRUE(IpAddress::Parse("::ffff:10.0.0.1")->is_v4());
  EXPECT_EQ(IpAddress::Parse("::ffff:10.0.0.1")->ToString(), "10.0.0.1");
}

TEST(IpAddressTest, FromSocketAddresses) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  ASSERT_EQ(inet_pton(AF_INET, "192.0.2.7", &in.sin_addr), 1);
  EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&in))->ToString(), "192.0.2.7");
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  ASSERT_EQ(inet_pton(AF_INET6, "2001:db8::9", &in6.sin6_addr), 1);
  EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&in6))->ToString(), "2001:db8::9");
  sockaddr un{};
  un.sa_family = AF_UNIX;
  EXPECT_FALSE(IpAddress::FromSockaddr(&un).has_value());
  EXPECT_FALSE(IpAddress::FromSockaddr(nullptr).has_value());
}

TEST(IpAddressTest, EmbeddedV4OfTranslationPrefixes) {
  EXPECT_EQ(IpAddress::Parse("64:ff9b::a9fe:a9fe")->EmbeddedV4(),
            IpAddress::Parse("169.254.169.254"));
  EXPECT_EQ(IpAddress::Parse("2002:0a00:0001::1")->EmbeddedV4(), IpAddress::Parse("10.0.0.1"));
  EXPECT_FALSE(IpAddress::Parse("2001:db8::1")->EmbeddedV4().has_value());
}

TEST(CidrTest, ParsesAndContains) {
  Cidr c = *Cidr::Parse("10.0.0.0/8");
  EXPECT_TRUE(c.Contains(*IpAddress::Parse("10.255.1.2")));
  EXPECT_TRUE(c.Contains(*IpAddress::Parse("::ffff:10.1.2.3")));
  EXPECT_FALSE(c.Contains(*IpAddress::Parse("11.0.0.1")));
  EXPECT_FALSE(c.Contains(*IpAddress::Parse("2001:db8::1")));
  EXPECT_EQ(c.ToString(), "10.0.0.0/8");
  EXPECT_EQ(Cidr::Parse("10.1.2.3/8")->ToString(), "10.0.0.0/8");
  EXPECT_EQ(Cidr::Parse("fc00::/7")->ToString(), "fc00::/7");
  EXPECT_TRUE(Cidr::Parse("fc00::/7")->Contains(*IpAddress::Parse("fd00:ec2::254")));
  EXPECT_EQ(Cidr::Parse("192.0.2.7")->ToString(), "192.0.2.7/32");
  EXPECT_TRUE(Cidr::Parse("0.0.0.0/0")->Contains(*IpAddress::Parse("203.0.113.1")));
}

TEST(CidrTest, RejectsBadInput) {
  for (const char* bad :
       {"10.0.0.0/33", "fc00::/129", "10.0.0.0/", "10.0.0.0/x", "host/8", "10.0.0.0/-1", ""}) {
    EXPECT_FALSE(Cidr::Parse(bad).ok()) << bad;
  }
}

TEST(CidrTest, Overlaps) {
  EXPECT_TRUE(Cidr::Parse("0.0.0.0/0")->Overlaps(*Cidr::Parse("169.254.0.0/16")));
  EXPECT_TRUE(Cidr::Parse("169.254.169.254")->Overlaps(*Cidr::Parse("169.254.0.0/16")));
  EXPECT_FALSE(Cidr::Parse("10.0.0.0/8")->Overlaps(*Cidr::Parse("169.254.0.0/16")));
  EXPECT_TRUE(Cidr::Parse("fd00::/8")->Overlaps(*Cidr::Parse("fd00:ec2::254/128")));
}

}  // namespace
}  // namespace airlock::netproxy
