// Implementation of common/http_server.h.
#include "common/http_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "common/log.h"

namespace rgpu::http {
namespace {

using Clock = std::chrono::steady_clock;

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

Parse fail(Response* error, int status, const std::string& why) {
  error->status = status;
  error->content_type = "text/plain; charset=utf-8";
  error->body = why + "\n";
  return Parse::kError;
}

// RFC 9110's tchar: what a method or a header name may hold.
bool is_tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool equals_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

}  // namespace

Parse parse_request(std::string_view head, Request* out, Response* error) {
  // Every LF must end a CRLF, and nothing but CR, LF and TAB below 0x20 (or DEL, or NUL) may come.
  for (size_t i = 0; i < head.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(head[i]);
    if (c == '\n' && (i == 0 || head[i - 1] != '\r')) return fail(error, 400, "lines must end in CRLF");
    if (c == '\r' && i + 1 < head.size() && head[i + 1] != '\n') return fail(error, 400, "a bare CR");
    if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
      return fail(error, 400, "a control character in the request");
  }
  const size_t end = head.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (head.size() >= kMaxHead) return fail(error, 431, "the request head is over 8 KiB");
    return Parse::kIncomplete;
  }
  if (end + 4 > kMaxHead) return fail(error, 431, "the request head is over 8 KiB");
  std::string_view rest = head.substr(0, end + 2);  // every line with its CRLF

  // The request line.
  size_t eol = rest.find("\r\n");
  std::string_view line = rest.substr(0, eol);
  rest.remove_prefix(eol + 2);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(error, 400, "the request line is not METHOD TARGET VERSION");
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 16 || !std::all_of(method.begin(), method.end(), is_tchar))
    return fail(error, 400, "a malformed method");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return fail(error, 400, "a malformed HTTP version");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return fail(error, 505, "only HTTP/1.1 and HTTP/1.0 are spoken");
  if (target.empty() || target.front() != '/' || target.size() > 2048)
    return fail(error, 400, "the target must be a path (starting with /), at most 2048 bytes");
  for (char c : target)
    if (c <= 0x20 || c >= 0x7f) return fail(error, 400, "the target holds a character that is not printable ASCII");

  // The headers.
  size_t count = 0;
  bool host = false;
  while (!rest.empty()) {
    eol = rest.find("\r\n");
    line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    if (++count > kMaxHeaders) return fail(error, 431, "more than 64 header lines");
    if (line.front() == ' ' || line.front() == '\t') return fail(error, 400, "folded header lines are not accepted");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(error, 400, "a header line without a name");
    std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar)) return fail(error, 400, "a malformed header name");
    std::string_view value = trim(line.substr(colon + 1));
    if (equals_nocase(name, "host")) {
      if (host) return fail(error, 400, "two Host headers");
      host = true;
    } else if (equals_nocase(name, "content-length")) {
      if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) { return c == '0'; }))
        return fail(error, 400, "a request with a body (this server answers GET and HEAD only)");
    } else if (equals_nocase(name, "transfer-encoding")) {
      return fail(error, 400, "a request with a body (this server answers GET and HEAD only)");
    }
  }
  if (version == "HTTP/1.1" && !host) return fail(error, 400, "an HTTP/1.1 request without a Host header");
  if (method != "GET" && method != "HEAD") {
    fail(error, 405, "only GET and HEAD are answered");
    error->allow = "GET, HEAD";
    return Parse::kError;
  }
  out->method = std::string(method);
  out->path = std::string(target.substr(0, target.find('?')));
  return Parse::kOk;
}

std::string format_response(const Response& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) +
                    "\r\nContent-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n";
  if (!r.allow.empty()) out += "Allow: " + r.allow + "\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

namespace {

struct Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  size_t sent = 0;
  enum State { kReading, kWriting, kLingering } state = kReading;
};

void close_connection(Connection& c) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
}

// The answer is out: stop writing and read what the peer still sends until it closes (closing with
// unread bytes would reset the connection and could lose the answer on the peer's side), for at
// most a second.
void linger(Connection& c) {
  ::shutdown(c.fd, SHUT_WR);
  c.state = Connection::kLingering;
  c.deadline = std::min(c.deadline, Clock::now() + std::chrono::seconds(1));
}

void answer(Connection& c, const std::function<Response(const Request&)>& handler) {
  Request req;
  Response error;
  Parse p = parse_request(c.in, &req, &error);
  if (p == Parse::kIncomplete) return;
  if (p == Parse::kOk) c.out = format_response(handler(req), req.method == "HEAD");
  else c.out = format_response(error, false);
  c.state = Connection::kWriting;
  c.deadline = Clock::now() + kRequestTimeout;
}

void read_some(Connection& c, const std::function<Response(const Request&)>& handler) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return close_connection(c);
    if (c.state == Connection::kLingering) continue;  // discarded
    c.in.append(buf, static_cast<size_t>(std::min<size_t>(static_cast<size_t>(n), kMaxHead + 1 - c.in.size())));
    answer(c, handler);
    if (c.state != Connection::kReading) return;
  }
}

void write_some(Connection& c) {
  while (c.sent < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return close_connection(c);
    c.sent += static_cast<size_t>(n);
  }
  linger(c);
}

[[noreturn]] void loop(int listen_fd, const std::function<Response(const Request&)>& handler) {
  std::deque<Connection> conns;  // oldest first
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({listen_fd, POLLIN, 0});
    auto now = Clock::now();
    auto wake = now + std::chrono::seconds(60);
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == Connection::kWriting ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, c.deadline);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(ms, 0) + 1)) < 0 && errno != EINTR) {
      log::warn("metrics endpoint: poll failed (%s)", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Connection& c = conns[i - 1];
      if (!fds[i].revents) continue;
      if (c.state == Connection::kWriting) {
        if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) close_connection(c);
        else write_some(c);
      } else {
        read_some(c, handler);
      }
      if (c.fd >= 0 && c.state == Connection::kWriting) write_some(c);
    }
    now = Clock::now();
    for (Connection& c : conns)
      if (c.fd >= 0 && now >= c.deadline) close_connection(c);  // too slow: no answer owed
    std::erase_if(conns, [](const Connection& c) { return c.fd < 0; });
    if (fds[0].revents & POLLIN) {
      for (int k = 0; k < 64; ++k) {
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (conns.size() >= kMaxConnections) {  // the oldest goes: a flood holds no slot for long
          close_connection(conns.front());
          conns.pop_front();
        }
        Connection c;
        c.fd = fd;
        c.deadline = Clock::now() + kRequestTimeout;
        conns.push_back(std::move(c));
      }
    }
  }
}

}  // namespace

void serve(int listen_fd, std::function<Response(const Request&)> handler) {
  ::fcntl(listen_fd, F_SETFL, ::fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
  std::thread([listen_fd, handler = std::move(handler)] { loop(listen_fd, handler); }).detach();
}

}  // namespace rgpu::http
