// Implementation of common/net.h over POSIX sockets.
#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

namespace rgpu::net {

bool parse_address(const std::string& s, uint16_t default_port, Address* out, std::string* err) {
  std::string host = s, port;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos) {
      *err = "bad address '" + s + "': missing ']'";
      return false;
    }
    host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') {
        *err = "bad address '" + s + "': expected ':' after ']'";
        return false;
      }
      port = s.substr(close + 2);
    }
  } else if (auto colon = s.rfind(':'); colon != std::string::npos) {
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  out->host = host.empty() ? "127.0.0.1" : host;
  out->port = default_port;
  if (!port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) {
      *err = "bad address '" + s + "': port must be a number from 1 to 65535";
      return false;
    }
    out->port = static_cast<uint16_t>(p);
  }
  return true;
}

static addrinfo* resolve(const Address& addr, bool passive, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  int rc = getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    *err = "cannot resolve '" + addr.host + "': " + gai_strerror(rc);
    return nullptr;
  }
  return res;
}

int connect_tcp(const Address& addr, std::string* err, int timeout_ms, int* cause) {
  addrinfo* res = resolve(addr, false, err);
  if (!res) return -1;
  int fd = -1, last_errno = ETIMEDOUT;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    // Non-blocking when bounded: a black-holed address would otherwise take the kernel's two
    // minutes of SYN retries.
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | (timeout_ms >= 0 ? SOCK_NONBLOCK : 0), ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int soerr = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      soerr = errno;
      if (soerr == EINPROGRESS) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLOUT, 0};
        soerr = ETIMEDOUT;
        // At least a moment, so the last attempt reports the real cause rather than a timeout.
        if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 50))) == 1) {
          socklen_t len = sizeof soerr;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        }
      }
    }
    if (soerr == 0) break;
    last_errno = soerr;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (cause) *cause = last_errno;
    *err = "cannot reach rgpu-server at " + addr.str() + ": " + std::strerror(last_errno);
    return -1;
  }
  if (timeout_ms >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_nodelay(fd);
  return fd;
}

int listen_tcp(const Address& addr, std::string* err) {
  addrinfo* res = resolve(addr, true, err);
  if (!res) return -1;
  int fd = -1, last_errno = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
    last_errno = errno;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) *err = "cannot listen on " + addr.str() + ": " + std::strerror(last_errno);
  return fd;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return std::string(host) + ":" + serv;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_recv_timeout(int fd, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

void set_buffers(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

ssize_t read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return got == 0 ? 0 : -1;
    } else if (errno != EINTR) {
      return -1;
    }
  }
  return static_cast<ssize_t>(n);
}

bool write_full(int fd, const void* buf, size_t n) {
  iovec iov{const_cast<void*>(buf), n};
  return writev_full(fd, &iov, 1);
}

bool writev_full(int fd, struct iovec* iov, int iovcnt, std::atomic<uint64_t>* counted) {
  while (iovcnt > 0) {
    // sendmsg with MSG_NOSIGNAL: a vanished peer must not SIGPIPE the user's program.
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt > IOV_MAX ? IOV_MAX : iovcnt);
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (counted) counted->fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
    size_t left = static_cast<size_t>(w);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

}  // namespace rgpu::net
