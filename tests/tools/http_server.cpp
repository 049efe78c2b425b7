// Host tests of lazygraph-serve's HTTP server (tools/serve/http_server.hpp; meson test 'lazygraph-serve-http'): how
// a handler tells that its client went away, and that a route served through HttpServer sees its own connection,
// over real loopback TCP connections. Milliseconds.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "serve/http_server.hpp"

namespace {

/// A connected pair of loopback TCP sockets (the server's end, the client's end), closed at the end.
struct Connection {
  Connection() {
    const int listening = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    auto* a = reinterpret_cast<sockaddr*>(&address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    REQUIRE(::bind(listening, a, length) == 0);
    REQUIRE(::listen(listening, 1) == 0);
    REQUIRE(::getsockname(listening, a, &length) == 0);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(::connect(client, a, length) == 0);
    server = ::accept(listening, nullptr, nullptr);
    REQUIRE(server >= 0);
    ::close(listening);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  Connection(Connection&&) = delete;
  Connection& operator=(Connection&&) = delete;
  ~Connection() {
    if (client >= 0) ::close(client);
    ::close(server);
  }
  /// Waits until the server's end has news of the client (bytes or its end), at most a second.
  void settle() const {
    pollfd p{.fd = server, .events = POLLIN, .revents = 0};
    ::poll(&p, 1, 1000);
  }
  int server = -1;
  int client = -1;
};

}  // namespace

TEST_CASE("a connection whose client is there, or sent bytes not yet read, is not closed, and the bytes stay") {
  const Connection c;
  CHECK_FALSE(lgserve::peer_closed(c.server));
  const std::string next = "GET /health HTTP/1.1\r\n";
  REQUIRE(::send(c.client, next.data(), next.size(), 0) == static_cast<ssize_t>(next.size()));
  c.settle();
  CHECK_FALSE(lgserve::peer_closed(c.server));
  std::array<char, 64> got{};
  CHECK(::recv(c.server, got.data(), got.size(), 0) == static_cast<ssize_t>(next.size()));
  CHECK(std::string(got.data(), next.size()) == next);
}

TEST_CASE("a client that closes its connection or resets it has gone") {
  SUBCASE("closed") {
    Connection c;
    ::close(c.client);
    c.client = -1;
    c.settle();
    CHECK(lgserve::peer_closed(c.server));
  }
  SUBCASE("closed after sending bytes nobody read") {
    Connection c;
    REQUIRE(::send(c.client, "x", 1, 0) == 1);
    ::close(c.client);
    c.client = -1;
    c.settle();
    CHECK(lgserve::peer_closed(c.server));
  }
  SUBCASE("reset") {
    Connection c;
    const linger abort{.l_onoff = 1, .l_linger = 0};
    REQUIRE(::setsockopt(c.client, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort)) == 0);
    ::close(c.client);
    c.client = -1;
    c.settle();
    CHECK(lgserve::peer_closed(c.server));
  }
}

TEST_CASE("a route served by HttpServer sees its own connection, which is open while its client waits") {
  lgserve::HttpServer server;
  std::atomic<bool> saw_connection = false;
  std::atomic<bool> open = false;
  server.Get("/who", [&](const httplib::Request&, httplib::Response& res) {
    const socket_t sock = lgserve::current_connection();
    saw_connection = sock >= 0;
    open = sock >= 0 && !lgserve::peer_closed(sock);
    res.set_content("ok", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread listening([&] { server.listen_after_bind(); });
  {
    httplib::Client client("127.0.0.1", port);
    client.set_keep_alive(true);
    for (int i = 0; i < 2; ++i) {  // twice over one kept-alive connection
      const httplib::Result got = client.Get("/who");
      REQUIRE(got);
      CHECK(got->status == 200);
      CHECK(got->body == "ok");
      CHECK(saw_connection.load());
      CHECK(open.load());
    }
  }
  CHECK(lgserve::current_connection() == -1);  // outside a handler
  server.stop();
  listening.join();
}
