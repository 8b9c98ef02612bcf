// A minimal, strict HTTP/1.1 responder for GET (and HEAD) of a few fixed paths: what
// `rgpu-server --metrics-listen` serves /metrics and /healthz with (server/metrics.h). It is network
// input, so it is built to take garbage: one request per connection (always `Connection: close`),
// a request head of at most kMaxHead bytes and kMaxHeaders header lines, no body, at most
// kMaxConnections connections at once (the oldest goes when another comes), and each connection
// must send its head within kRequestTimeout and take its answer within the same time again. All
// of it runs on one thread, in a poll loop over non-blocking sockets, so a slow or hostile peer
// holds nothing but its own connection.
//
// Parsing is apart from the sockets (parse_request) so that a unit test and a fuzz target can feed
// it bytes: tests/fuzz/http_request_fuzz.cpp, common/http_server_test.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace rgpu::http {

inline constexpr size_t kMaxHead = 8192;
inline constexpr size_t kMaxHeaders = 64;
inline constexpr size_t kMaxConnections = 16;
inline constexpr std::chrono::milliseconds kRequestTimeout{5000};

struct Request {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // without the query string
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string allow;  // the Allow header of a 405 ("" for none)
};

enum class Parse {
  kIncomplete,  // no blank line yet (read more, unless kMaxHead bytes came already)
  kOk,          // *out holds the request
  kError,       // *error holds the response to send (400, 405, 411, 413, 431, 501, 505)
};

// Parses `head`: the bytes a connection sent so far. The request line must be
// `METHOD SP TARGET SP HTTP/1.x` and every line must end in CRLF; the method must be GET or HEAD
// (405 otherwise); the target an origin-form path of printable ASCII; the headers `name: value`
// with a token name, no body (Content-Length other than 0, Transfer-Encoding: 400).
Parse parse_request(std::string_view head, Request* out, Response* error);

// The whole answer to send, head and (unless the request was HEAD) body.
std::string format_response(const Response& r, bool head_only);

// Serves `listen_fd` (a listening TCP socket) on a thread of its own, forever: each request goes to
// `handler` (called on that thread; it must return promptly). The thread is detached; the socket is
// made non-blocking.
void serve(int listen_fd, std::function<Response(const Request&)> handler);

}  // namespace rgpu::http
