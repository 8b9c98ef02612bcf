// Implementation of tools/faultproxy/faultproxy.h: one thread per relayed connection, polling
// both sockets, so the fault strikes at an exact byte count or time.
#include "tools/faultproxy/faultproxy.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <vector>

#include "common/log.h"

namespace rgpu::faultproxy {
namespace {

constexpr const char* kNames[] = {"none", "cut", "reset", "stall", "blackhole", "half-close"};

// Closing with a zero linger sends RST instead of FIN.
void reset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

}  // namespace

bool parse_fault(const std::string& s, Fault* out) {
  for (int i = 0; i < 6; ++i) {
    if (s == kNames[i]) {
      *out = static_cast<Fault>(i);
      return true;
    }
  }
  return false;
}

const char* fault_name(Fault f) { return kNames[static_cast<int>(f)]; }

Proxy::Proxy(int listen_fd, Options options) : listen_fd_(listen_fd), options_(std::move(options)) {}

Proxy::~Proxy() {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : threads_) t.join();
  ::close(listen_fd_);
}

void Proxy::stop() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
}

uint16_t Proxy::port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void Proxy::run() {
  for (int n = 1; !stopping_; ++n) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (options_.max_connections > 0 && n > options_.max_connections) {
      ::close(fd);
      continue;
    }
    bool faulty = options_.fault != Fault::kNone && (options_.faulty_connections == 0 || n <= options_.faulty_connections);
    uint64_t after = options_.after_bytes;
    if (options_.after_bytes_max > after) {
      std::mt19937_64 rng(options_.seed * 1000003u + static_cast<uint64_t>(n));
      after += rng() % (options_.after_bytes_max - after + 1);
    }
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([this, fd, faulty, after] { relay(fd, faulty, after); });
  }
}

void Proxy::relay(int client, bool faulty, uint64_t after_bytes) {
  std::string err;
  int target = net::connect_tcp(options_.target, &err);
  if (target < 0) {
    log::warn("rgpu-faultproxy: %s", err.c_str());
    ::close(client);
    return;
  }
  net::set_nodelay(client);
  const auto start = std::chrono::steady_clock::now();
  const bool by_bytes = after_bytes > 0, by_time = options_.after_ms.count() > 0;
  const int requests_seen = strike_requests_.load();
  uint64_t upstream = 0;
  Fault state = Fault::kNone;  // the fault in force, once struck
  bool client_open = true, target_open = true, downstream_open = true;
  auto strike = [&] {
    state = options_.fault;
    ++struck_;
    switch (state) {
      case Fault::kCut:
        ::shutdown(client, SHUT_RDWR);
        ::shutdown(target, SHUT_RDWR);
        client_open = target_open = false;
        break;
      case Fault::kReset:
        reset(client);
        reset(target);
        client = target = -1;
        client_open = target_open = false;
        break;
      case Fault::kHalfClose:
        // The client sees the server's side end; what it sends still gets through.
        ::shutdown(client, SHUT_WR);
        downstream_open = false;
        break;
      default:
        break;
    }
  };
  if (faulty && !by_bytes && !by_time && !options_.on_request) strike();
  std::vector<uint8_t> buf(64 << 10);
  while (!stopping_ && (client_open || target_open)) {
    int timeout = 100;  // look at stopping_ and strike requests now and then
    if (faulty && state == Fault::kNone && options_.on_request && strike_requests_.load() != requests_seen) {
      strike();
      continue;
    }
    if (faulty && state == Fault::kNone && by_time) {
      auto left = options_.after_ms - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      if (left.count() <= 0) {
        strike();
        continue;
      }
      timeout = static_cast<int>(std::min<long long>(timeout, left.count()));
    }
    // A stall reads nothing (the peers' buffers fill); a black hole reads and drops everything.
    const bool reading = state != Fault::kStall;
    pollfd p[2] = {{client_open && reading ? client : -1, POLLIN, 0}, {target_open && reading ? target : -1, POLLIN, 0}};
    if (::poll(p, 2, timeout) < 0 && errno != EINTR) break;
    for (int side = 0; side < 2; ++side) {
      if (!(p[side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int from = side == 0 ? client : target, to = side == 0 ? target : client;
      size_t want = buf.size();
      if (side == 0 && faulty && state == Fault::kNone && by_bytes) want = std::min<uint64_t>(want, after_bytes - upstream);
      ssize_t r = ::recv(from, buf.data(), want, 0);
      if (r <= 0) {
        // One side ended: end the other too (the relay has nothing more to do).
        (side == 0 ? client_open : target_open) = false;
        if (state != Fault::kBlackhole && state != Fault::kHalfClose) {
          if (to >= 0) ::shutdown(to, SHUT_WR);
          if (!client_open && !target_open) break;
        }
        continue;
      }
      bool forward = state == Fault::kNone || (state == Fault::kHalfClose && side == 0);
      if (side == 1 && !downstream_open) forward = false;
      if (forward && !net::write_full(to, buf.data(), static_cast<size_t>(r))) client_open = target_open = false;
      if (side == 0 && state == Fault::kNone) {
        upstream += static_cast<uint64_t>(r);
        if (faulty && by_bytes && upstream >= after_bytes) strike();
      }
      if (!client_open && !target_open) break;
    }
  }
  // Stalls and black holes keep both sockets open until the proxy stops.
  while (!stopping_ && (state == Fault::kStall || state == Fault::kBlackhole)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (state == Fault::kBlackhole) {
      // Keep draining so senders never block.
      while (client >= 0 && ::recv(client, buf.data(), buf.size(), MSG_DONTWAIT) > 0) {}
      while (target >= 0 && ::recv(target, buf.data(), buf.size(), MSG_DONTWAIT) > 0) {}
    }
  }
  if (client >= 0) ::close(client);
  if (target >= 0) ::close(target);
}

}  // namespace rgpu::faultproxy
