// The HTTP server against a real client on loopback: routing, the error mapping, keep-alive,
// limits, streamed bodies both ways, authentication, and the thread-to-coroutine queue.
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <mutex>
#include <thread>

#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/thread_pool.hpp"
#include "common/status.h"
#include "gtest/gtest.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/stream_queue.h"

namespace airlock::http {
namespace {

using boost::beast::http::verb;

class ServerTest : public ::testing::Test {
 protected:
  void Start(Router router, ServerOptions options = {}) {
    auto s = Server::Start(std::move(options), std::move(router));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    auto c = Client::Create(
        {.base_url = "http://127.0.0.1:" + std::to_string(server_->port()), .api_key = "k1"});
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }

  // A new connection to the server.
  int Connect() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }

  // Sends raw bytes on a fresh connection and returns everything the server answers (within
  // `timeout` of silence, when one is given).
  std::string Raw(const std::string& bytes, std::chrono::milliseconds timeout = {}) {
    int fd = Connect();
    if (timeout.count() > 0) {
      timeval tv = {static_cast<time_t>(timeout.count() / 1000),
                    static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
      EXPECT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    }
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::shutdown(fd, SHUT_WR);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

Router EchoRouter() {
  Router r;
  r.Add(verb::get, "/v1/things/{id}", [](Exchange& ex) -> asio::awaitable<void> {
    nlohmann::json body = {{"id", ex.request().params.at("id")},
                           {"q", ex.request().Query("q").value_or("")}};
    co_await ex.RespondJson(200, body);
  });
  r.Add(verb::post, "/v1/things/{id}/do:it",
        [](Exchange& ex) -> asio::awaitable<void> {
          nlohmann::json body = {{"len", ex.request().body.size()}};
          co_await ex.RespondJson(201, body);
        },
        {.max_body_bytes = 100});
  r.Add(verb::get, "/v1/fail/{code}", [](Exchange& ex) -> asio::awaitable<void> {
    std::string c = ex.request().params.at("code");
    absl::Status s = c == "notfound"   ? NotFound("no such thing")
                     : c == "bad"      ? InvalidArgument("argv: must not be empty")
                     : c == "conflict" ? FailedPrecondition("sandbox is Paused")
                                       : Internal("secret detail");
    co_await ex.RespondError(s);
  });
  r.Add(verb::get, "/v1/silent", [](Exchange&) -> asio::awaitable<void> { co_return; });
  return r;
}

TEST(PercentDecodeTest, DecodesAndRefuses) {
  EXPECT_EQ(PercentDecode("a%20b%2Fc", false), "a b/c");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_EQ(PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(PercentDecode("a%2", false), std::nullopt);
  EXPECT_EQ(PercentDecode("a%zz", false), std::nullopt);
  EXPECT_EQ(PercentDecode("a%00b", false), std::nullopt);
}

TEST(PercentEncodeTest, EncodesAllButUnreservedAndKept) {
  EXPECT_EQ(PercentEncode("a b/c~d.e_f-g"), "a%20b%2Fc~d.e_f-g");
  EXPECT_EQ(PercentEncode("/x/\r\n\xc3\xa9", "/"), "/x/%0D%0A%C3%A9");
  EXPECT_EQ(PercentDecode(PercentEncode("any\x01thing %/"), false), "any\x01thing %/");
}

// A handler that puts a value with CR LF in a header cannot end the header block: the control
// characters go out as %XX, in that header.
TEST_F(ServerTest, AHeaderValueCannotSplitTheResponse) {
  Router r;
  r.Add(verb::get, "/v1/h", [](Exchange& ex) -> asio::awaitable<void> {
    std::vector<std::pair<std::string, std::string>> headers;
    headers.emplace_back("X-Name", "a\r\nContent-Length: 6\r\n\r\nforged");
    co_await ex.Respond(200, "text/plain", "real", std::move(headers));
  });
  Start(std::move(r));
  std::string out = Raw("GET /v1/h HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n");
  EXPECT_NE(out.find("X-Name: a%0D%0AContent-Length: 6%0D%0A%0D%0Aforged\r\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Content-Length: 4\r\n"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with("\r\n\r\nreal")) << out;
}

TEST_F(ServerTest, RoutesCaptureParamsAndQueries) {
  Start(EchoRouter());
  auto r = client_->Send(verb::get, "/v1/things/sb-42?q=a%20b&x=1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["id"], "sb-42");
  EXPECT_EQ(j["q"], "a b");
  EXPECT_FALSE(r->Header("X-Request-Id").empty());
  auto p = client_->Send(verb::post, "/v1/things/sb-1/do:it", "hello", "application/json");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->status, 201);
  EXPECT_EQ(nlohmann::json::parse(p->body)["len"], 5);
}

TEST_F(ServerTest, ErrorsAreMappedInOnePlaceWithABody) {
  Start(EchoRouter());
  struct Case {
    std::string target;
    int status;
    std::string code;
  } cases[] = {
      {"/v1/nothing", 404, "not_found"},         {"/v1/fail/notfound", 404, "not_found"},
      {"/v1/fail/bad", 422, "invalid_argument"}, {"/v1/fail/conflict", 409, "failed_precondition"},
      {"/v1/fail/internal", 500, "internal"},    {"/v1/silent", 500, "internal"}};
  for (const Case& c : cases) {
    auto r = client_->Send(verb::get, c.target, {}, {}, {{"X-Request-Id", "trace-7"}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, c.status) << c.target;
    auto j = nlohmann::json::parse(r->body);
    EXPECT_EQ(j["code"], c.code) << c.target;
    EXPECT_EQ(j["request_id"], "trace-7");
    EXPECT_FALSE(j["message"].get<std::string>().empty());
  }
  // An internal error never shows its detail.
  auto r = client_->Send(verb::get, "/v1/fail/internal");
  EXPECT_EQ(r->body.find("secret detail"), std::string::npos) << r->body;
  // A known path with another method.
  auto m = client_->Send(verb::delete_, "/v1/things/sb-1");
  EXPECT_EQ(m->status, 405);
  EXPECT_EQ(nlohmann::json::parse(m->body)["code"], "method_not_allowed");
}

TEST_F(ServerTest, OversizedBodiesAre413AndTheConnectionRecovers) {
  Start(EchoRouter());
  auto r = client_->Send(verb::post, "/v1/things/x/do:it", std::string(101, 'a'), "text/plain");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(nlohmann::json::parse(r->body)["code"], "payload_too_large");
  // Chunked, so the server learns the size only while reading.
  int calls = 0;
  auto u = client_->Upload(
      verb::post, "/v1/things/x/do:it",
      [&]() -> absl::StatusOr<std::string> {
        return ++calls <= 3 ? std::string(60, 'b') : std::string();
      },
      "text/plain");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->status, 413);
  auto ok = client_->Send(verb::get, "/v1/things/again");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

// Attack: an endless chunk extension ("1;" then megabytes without a line end), which Beast's
// header and body limits do not count, to make the server buffer it all. The read buffer's bound
// ends it with a 400 as soon as the line outgrows it.
TEST_F(ServerTest, AnEndlessChunkHeaderIsRefused) {
  Start(EchoRouter());
  std::string out =
      Raw("POST /v1/things/sb-1/do:it HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n"
          "Transfer-Encoding: chunked\r\n\r\n1;" +
          std::string(4 << 20, 'a'));
  EXPECT_TRUE(out.starts_with("HTTP/1.1 400")) << out.substr(0, 200);
  EXPECT_NE(out.find("buffer overflow"), std::string::npos) << out.substr(0, 400);
}

// Attack: a local process fills every connection slot with kept-alive connections that sent one
// request and then wait (or with silent ones), so that nobody else gets in. A full server closes
// the connection that has waited longest for a request head, and the new client is served.
TEST_F(ServerTest, IdleConnectionsCannotLockNewClientsOut) {
  ServerOptions options;
  options.max_connections = 3;
  Start(EchoRouter(), options);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    int fd = Connect();
    std::string req = "GET /v1/things/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n";
    ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    char buf[512];
    ASSERT_GT(::read(fd, buf, sizeof(buf)), 0);  // answered; now it waits, kept alive
    idle.push_back(fd);
  }
  for (int i = 0; i < 3; ++i) {  // each new client takes the place of the longest waiting
    auto r = client_->Send(verb::get, "/v1/things/new");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    client_.reset();
    auto c = Client::Create(
        {.base_url = "http://127.0.0.1:" + std::to_string(server_->port()), .api_key = "k1"});
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }
  for (int fd : idle) ::close(fd);
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  Start(EchoRouter());
  for (int i = 0; i < 50; ++i) {
    auto r = client_->Send(verb::get, "/v1/things/" + std::to_string(i));
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->status, 200);
  }
  EXPECT_EQ(server_->open_connections(), 1u);
}

TEST_F(ServerTest, GarbageAndHugeHeadsGetClearAnswers) {
  Start(EchoRouter());
  std::string huge =
      "GET /v1/things/1 HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(Raw(huge).rfind("HTTP/1.1 431", 0), 0u);
  std::string bad_target = "GET /v1/things/%zz HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(Raw(bad_target).rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(Raw("\x16\x03\x01 not http at all\r\n\r\n"), "");  // closed without an answer
}

// An open /healthz and an authenticated /v1/whoami that answers with the principal.
void AddHealthAndWhoami(Router& r) {
  r.Add(
      verb::get, "/healthz",
      [](Exchange& ex) -> asio::awaitable<void> { co_await ex.Respond(200, "text/plain", "ok\n"); },
      {.authenticated = false});
  r.Add(verb::get, "/v1/whoami", [](Exchange& ex) -> asio::awaitable<void> {
    nlohmann::json body = {{"principal", ex.principal()}};
    co_await ex.RespondJson(200, body);
  });
}

TEST_F(ServerTest, AuthenticationRunsBeforeProtectedRoutesOnly) {
  Router r = EchoRouter();
  AddHealthAndWhoami(r);
  ServerOptions o;
  o.authenticate = [](Exchange& ex) -> absl::Status {
    std::string auth = ex.request().Header("Authorization");
    if (auth.empty()) {
      return WithReason(absl::UnauthenticatedError("missing Authorization: Bearer <api key>"),
                        Reason::kUnauthenticated);
    }
    if (auth != "Bearer k1") return absl::UnauthenticatedError("unknown API key");
    ex.set_principal("user-1");
    return absl::OkStatus();
  };
  Start(std::move(r), o);
  auto who = client_->Send(verb::get, "/v1/whoami");
  EXPECT_EQ(nlohmann::json::parse(who->body)["principal"], "user-1");
  auto anon = Client::Create({.base_url = "http://127.0.0.1:" + std::to_string(server_->port())});
  auto denied = (*anon)->Send(verb::get, "/v1/whoami");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ((*anon)->Send(verb::get, "/healthz")->status, 200);
  auto wrong = Client::Create(
      {.base_url = "http://127.0.0.1:" + std::to_string(server_->port()), .api_key = "k2"});
  EXPECT_EQ((*wrong)->Send(verb::get, "/v1/whoami")->status, 401);
}

// An authenticator that stalls (a store waiting on its disk) holds up only its own request when it
// runs on a pool: on a server with one I/O thread, an open route answers while an authentication
// is still waiting, and the waiting request is answered once the authenticator is let go. With
// the authenticator on the I/O thread the open route would get no answer before its timeout.
TEST_F(ServerTest, StalledAuthenticationHoldsUpOnlyItsOwnRequest) {
  boost::asio::thread_pool pool(1);
  Router r;
  AddHealthAndWhoami(r);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> entered;
  ServerOptions o;
  o.threads = 1;
  o.authenticate = [&, once = std::make_shared<std::once_flag>()](Exchange& ex) {
    std::call_once(*once, [&] { entered.set_value(); });
    released.wait();
    ex.set_principal("user-1");
    return absl::OkStatus();
  };
  o.authenticate_on = pool.get_executor();
  Start(std::move(r), o);

  absl::StatusOr<ClientResponse> who;
  std::thread waiting([&] { who = client_->Send(verb::get, "/v1/whoami"); });
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::string health =
      Raw("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::milliseconds(3000));
  release.set_value();
  waiting.join();
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->status, 200);
  EXPECT_EQ(nlohmann::json::parse(who->body)["principal"], "user-1");
  pool.join();
}

// Answers with a chunked stream of what `q` yields, until it closes or the client leaves.
asio::awaitable<void> Pump(Exchange& ex, std::shared_ptr<StreamQueue<std::string>> q,
                           std::string_view content_type) {
  co_await ex.BeginStream(200, content_type);
  while (auto item = co_await q->Pop()) {
    if (!co_await ex.Write(*item)) {
      q->Abandon();
      break;
    }
  }
  co_await ex.EndStream();
}

TEST_F(ServerTest, StreamsFromAThreadThroughTheQueue) {
  boost::asio::thread_pool pool(2);
  Router r;
  r.Add(verb::get, "/v1/stream", [&pool](Exchange& ex) -> asio::awaitable<void> {
    auto q = std::make_shared<StreamQueue<std::string>>(ex.executor(), 4);
    boost::asio::post(pool, [q] {
      for (int i = 0; i < 100; ++i) {
        if (!q->Push("event " + std::to_string(i) + "\n")) return;
      }
      q->Close();
    });
    co_await Pump(ex, q, "text/event-stream");
  });
  Start(std::move(r));
  std::string got;
  auto s = client_->SendStreaming(verb::get, "/v1/stream", {}, {}, [&](std::string_view d) {
    got.append(d);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status, 200);
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "event " + std::to_string(i) + "\n";
  EXPECT_EQ(got, expected);  // every item, in order, through a queue of 4
  // The connection is still usable after a complete chunked response.
  auto again = client_->SendStreaming(verb::get, "/v1/stream", {}, {}, [](std::string_view) {
    return false;  // the client leaves after the first chunk
  });
  ASSERT_TRUE(again.ok());
  pool.join();  // the producer noticed the client left (Push returned false) and ended
}

// A streaming client hands each chunk over as it arrives, not when its buffer fills: the server
// sends its second chunk only once the client has seen the first (or, after 5 s, a "late" one).
TEST_F(ServerTest, StreamingClientSeesEachChunkAsItArrives) {
  boost::asio::thread_pool pool(1);
  std::promise<void> seen;
  std::future<void> seen_future = seen.get_future();
  Router r;
  r.Add(verb::get, "/v1/live", [&](Exchange& ex) -> asio::awaitable<void> {
    auto q = std::make_shared<StreamQueue<std::string>>(ex.executor(), 4);
    boost::asio::post(pool, [q, &seen_future] {
      q->Push("first\n");
      bool in_time = seen_future.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
      q->Push(in_time ? "second\n" : "late\n");
      q->Close();
    });
    co_await Pump(ex, q, "text/plain");
  });
  Start(std::move(r));
  std::string got;
  bool signalled = false;
  auto s = client_->SendStreaming(verb::get, "/v1/live", {}, {}, [&](std::string_view d) {
    got.append(d);
    if (!signalled && got.find("first\n") != std::string::npos) {
      signalled = true;
      seen.set_value();
    }
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(got, "first\nsecond\n");
  pool.join();
}

// A server that takes the connection and never answers (a hung process, a stuck proxy): each
// call fails after the client's timeout, saying so, instead of waiting for ever.
TEST_F(ServerTest, AClientCallToAServerThatNeverAnswersTimesOut) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);  // the kernel completes connections; nobody reads them
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  auto c = Client::Create({.base_url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)),
                           .timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < 2; ++i) {  // the second call reconnects and times out again
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ClientResponse> r = (*c)->Send(verb::get, "/v1/anything");
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("timeout"), std::string::npos) << r.status();
    EXPECT_GE(took, std::chrono::milliseconds(250));
    EXPECT_LT(took, std::chrono::seconds(10));
  }
  ::close(fd);
}

// A call whose answer comes late by design (a command's result) passes its own answer timeout;
// without it the same call times out.
TEST_F(ServerTest, AnAnswerTimeoutLetsALateAnswerCome) {
  Router r;
  r.Add(verb::get, "/v1/slow", [](Exchange& ex) -> asio::awaitable<void> {
    asio::steady_timer t(ex.executor(), std::chrono::milliseconds(800));
    co_await t.async_wait(asio::use_awaitable);
    co_await ex.Respond(200, "text/plain", "done");
  });
  Start(std::move(r));
  auto c = Client::Create({.base_url = "http://127.0.0.1:" + std::to_string(server_->port()),
                           .timeout = std::chrono::milliseconds(200)});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<ClientResponse> late = (*c)->Send(verb::get, "/v1/slow");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  absl::StatusOr<ClientResponse> waited =
      (*c)->Send(verb::get, "/v1/slow", {}, {}, {}, std::chrono::seconds(10));
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->body, "done");
}

// An event stream that goes quiet for longer than the client's read timeout (a command that
// prints nothing for a while) stays up: the server sends keep-alive comments meanwhile.
TEST_F(ServerTest, AQuietEventStreamIsKeptAliveForTheClient) {
  boost::asio::thread_pool pool(1);
  Router r;
  r.Add(verb::get, "/v1/quiet", [&](Exchange& ex) -> asio::awaitable<void> {
    auto q = std::make_shared<StreamQueue<std::string>>(ex.executor(), 4);
    boost::asio::post(pool, [q] {
      q->Push("event: a\ndata: 1\n\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(900));
      q->Push("event: b\ndata: 2\n\n");
      q->Close();
    });
    co_await StreamResponse(ex, 200, "text/event-stream", q, {}, std::chrono::milliseconds(100));
  });
  Start(std::move(r));
  auto c = Client::Create({.base_url = "http://127.0.0.1:" + std::to_string(server_->port()),
                           .timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(c.ok());
  std::string got;
  auto s = (*c)->SendStreaming(verb::get, "/v1/quiet", {}, {}, [&](std::string_view d) {
    got.append(d);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(got.find(": keep-alive\n\n"), std::string::npos) << got;
  std::string events = got;
  for (size_t at; (at = events.find(": keep-alive\n\n")) != std::string::npos;) {
    events.erase(at, 14);
  }
  EXPECT_EQ(events, "event: a\ndata: 1\n\nevent: b\ndata: 2\n\n") << got;
  pool.join();
}

TEST_F(ServerTest, StreamedRequestBodiesArriveInChunks) {
  Router r;
  r.Add(verb::put, "/v1/upload",
        [](Exchange& ex) -> asio::awaitable<void> {
          size_t total = 0;
          for (;;) {
            absl::StatusOr<std::string> chunk = co_await ex.ReadBodyChunk();
            if (!chunk.ok()) {
              co_await ex.RespondError(chunk.status());
              co_return;
            }
            if (chunk->empty()) break;
            total += chunk->size();
          }
          nlohmann::json body = {{"bytes", total}};
          co_await ex.RespondJson(200, body);
        },
        {.max_body_bytes = 8 << 20, .stream_body = true});
  Start(std::move(r));
  int n = 0;
  auto u = client_->Upload(
      verb::put, "/v1/upload",
      [&]() -> absl::StatusOr<std::string> {
        return ++n <= 64 ? std::string(100000, 'x') : std::string();
      },
      "application/octet-stream");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->status, 200);
  EXPECT_EQ(nlohmann::json::parse(u->body)["bytes"], 6400000);
  n = 0;
  auto big = client_->Upload(
      verb::put, "/v1/upload",
      [&]() -> absl::StatusOr<std::string> {
        return ++n <= 100 ? std::string(100000, 'x') : std::string();
      },
      "application/octet-stream");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->status, 413);
  // Content-Length over the limit is refused before the body is read.
  auto cl = client_->Send(verb::put, "/v1/upload", std::string(9 << 20, 'y'), "text/plain");
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->status, 413);
}

TEST_F(ServerTest, ExpectContinueIsAnswered) {
  Start(EchoRouter());
  std::string out =
      Raw("POST /v1/things/1/do:it HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
          "Expect: 100-continue\r\nConnection: close\r\n\r\nabc");
  EXPECT_EQ(out.rfind("HTTP/1.1 100 Continue", 0), 0u) << out;
  EXPECT_NE(out.find("HTTP/1.1 201"), std::string::npos) << out;
}

TEST(RunBlockingTest, ReturnsTheValueOnTheCallersExecutor) {
  boost::asio::io_context ioc;
  boost::asio::thread_pool pool(1);
  std::thread::id caller, worker;
  int value = 0;
  boost::asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        caller = std::this_thread::get_id();
        value = co_await RunBlocking(pool.get_executor(), [&] {
          worker = std::this_thread::get_id();
          return 42;
        });
        EXPECT_EQ(std::this_thread::get_id(), caller);
      },
      boost::asio::detached);
  ioc.run();
  pool.join();
  EXPECT_EQ(value, 42);
  EXPECT_NE(caller, worker);
}

}  // namespace
}  // namespace airlock::http
