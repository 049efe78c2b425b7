#pragma once
// lazygraph-serve's HTTP server: cpp-httplib's, with the connection's socket known to the handler that serves it, so
// that a handler waiting for a whole (non-streamed) answer notices a client that went away (peer_closed) and cancels
// its request. cpp-httplib 0.11 (Debian 12's) gives a handler no way to see its connection.

#include <httplib.h>

namespace lgserve {

/// The socket of the connection the calling thread serves (inside a route's handler), or -1 outside one.
[[nodiscard]] socket_t current_connection() noexcept;

/// Whether the client of connected socket `sock` has gone: it closed its side (the socket reads end of file), reset
/// the connection, or the socket failed. Bytes the client sent and nobody read yet (a next request) are left
/// unread. Never blocks. A client that only shuts down its sending side counts as gone.
[[nodiscard]] bool peer_closed(socket_t sock) noexcept;

/// httplib::Server serving each connection through a stream of its own (the reads and writes cpp-httplib's socket
/// stream makes, with its timeouts and keep-alive rules), so that current_connection() names the socket, and a
/// write-ready check (httplib::DataSink::is_writable in a streamed answer) is false once peer_closed.
class HttpServer final : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace lgserve
