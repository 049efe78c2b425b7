#include "serve/http_server.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace lgserve {
namespace {

thread_local socket_t current_socket = -1;

/// poll for `events` on `sock` for up to `timeout` (-1: forever); the revents, 0 on a timeout, -1 on a failure.
int wait_for(socket_t sock, short events, std::chrono::milliseconds timeout) noexcept {
  pollfd p{.fd = sock, .events = events, .revents = 0};
  int n = 0;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  return n == 0 ? 0 : p.revents;
}

std::chrono::milliseconds duration(time_t seconds, time_t microseconds) {
  return std::chrono::milliseconds(seconds * 1000 + microseconds / 1000);
}

/// The address and port of `sock`'s end (`peer`) or ours, numeric.
void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  auto* a = reinterpret_cast<sockaddr*>(&address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if ((peer ? ::getpeername(sock, a, &length) : ::getsockname(sock, a, &length)) != 0) return;
  std::vector<char> host(NI_MAXHOST);
  std::vector<char> service(NI_MAXSERV);
  if (::getnameinfo(a, length, host.data(), static_cast<socklen_t>(host.size()), service.data(),
                    static_cast<socklen_t>(service.size()), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host.data();
    port = std::stoi(service.data());
  }
}

/// One connection's reads and writes, as cpp-httplib's SocketStream makes them: each waits for the socket up to its
/// timeout, reads are buffered (requests are parsed a byte at a time), writes never raise SIGPIPE.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
      : sock_(sock), read_timeout_(read_timeout), write_timeout_(write_timeout), buffer_(4096) {}

  bool is_readable() const override { return wait_for(sock_, POLLIN, read_timeout_) > 0; }
  bool is_writable() const override {
    const int ready = wait_for(sock_, POLLOUT, write_timeout_);
    return ready > 0 && (ready & (POLLERR | POLLHUP)) == 0 && !peer_closed(sock_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (offset_ < filled_) {
      const std::size_t n = std::min(size, filled_ - offset_);
      std::memcpy(ptr, buffer_.data() + offset_, n);
      offset_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!is_readable()) return -1;
    offset_ = filled_ = 0;
    if (size >= buffer_.size()) return receive(ptr, size);
    const ssize_t got = receive(buffer_.data(), buffer_.size());
    if (got <= 0) return got;
    const std::size_t n = std::min(size, static_cast<std::size_t>(got));
    std::memcpy(ptr, buffer_.data(), n);
    offset_ = n;
    filled_ = static_cast<std::size_t>(got);
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n = 0;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t receive(char* ptr, std::size_t size) const {
    ssize_t n = 0;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  socket_t sock_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
  std::vector<char> buffer_;
  std::size_t offset_ = 0;
  std::size_t filled_ = 0;
};

/// Sets current_socket for the calling thread while it lives.
class CurrentConnection {
 public:
  explicit CurrentConnection(socket_t sock) noexcept { current_socket = sock; }
  CurrentConnection(const CurrentConnection&) = delete;
  CurrentConnection& operator=(const CurrentConnection&) = delete;
  CurrentConnection(CurrentConnection&&) = delete;
  CurrentConnection& operator=(CurrentConnection&&) = delete;
  ~CurrentConnection() { current_socket = -1; }
};

}  // namespace

socket_t current_connection() noexcept { return current_socket; }

bool peer_closed(socket_t sock) noexcept {
  const int ready = wait_for(sock, POLLIN | POLLRDHUP, std::chrono::milliseconds(0));
  if (ready < 0 || (ready & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) != 0) return true;
  if ((ready & POLLIN) == 0) return false;
  char byte = 0;
  ssize_t n = 0;
  do {
    n = ::recv(sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  // cpp-httplib's loop: up to keep_alive_max_count requests, each after the client sent something within the
  // keep-alive timeout, while the server listens; the last request closes the connection.
  const CurrentConnection current(sock);
  ConnectionStream stream(sock, duration(read_timeout_sec_, read_timeout_usec_),
                          duration(write_timeout_sec_, write_timeout_usec_));
  bool ok = false;
  // The wait for a next request looks at the server every 100 ms, so that stop() does not wait out the timeout.
  const auto next_request = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET) {
      const int ready = wait_for(sock, POLLIN, std::chrono::milliseconds(100));
      if (ready != 0) return ready > 0;
      if (std::chrono::steady_clock::now() >= until) return false;
    }
    return false;
  };
  for (std::size_t left = keep_alive_max_count_; left > 0 && next_request(); --left) {
    bool connection_closed = false;
    ok = process_request(stream, left == 1, connection_closed, nullptr);
    if (!ok || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace lgserve
