// Implementation of protocol/transport.h.
#include "protocol/transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"

namespace rgpu::proto {

Traffic& traffic() {
  static Traffic* t = new Traffic;  // leaked: used by threads still running at exit
  return *t;
}

bool prepare_read_timeout(int fd, std::chrono::milliseconds timeout, std::chrono::milliseconds* current) {
  if (timeout.count() == 0) return true;
  if (timeout != *current) {
    timeval tv{};
    if (timeout != kForever) {
      auto ms = std::max<long long>(timeout.count(), 1);
      tv.tv_sec = ms / 1000;
      tv.tv_usec = (ms % 1000) * 1000;
    }
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    *current = timeout;
  }
  return false;
}

namespace {

class SocketTransport : public Transport {
 public:
  SocketTransport(int fd, bool owns_fd) : fd_(fd), owns_fd_(owns_fd) {}
  ~SocketTransport() override {
    if (owns_fd_) ::close(fd_);
  }

  bool write(const iovec* iov, int count) override {
    // writev_full advances the iovecs it is given; work on a copy.
    iovec local[16];
    std::vector<iovec> big;
    iovec* v = local;
    if (count > 16) {
      big.assign(iov, iov + count);
      v = big.data();
    } else {
      std::copy(iov, iov + count, local);
    }
    return net::writev_full(fd_, v, count, &traffic().written);
  }

  ssize_t read_some(void* buf, size_t n, std::chrono::milliseconds timeout) override {
    // A zero timeout is a look (a spinning reader, common/spin_policy.h): one recv that does not
    // block, and the socket's timeout left as it is. SO_RCVTIMEO rounds zero up to a millisecond
    // of blocking, which made every "spin" a sleep in the kernel (issue 16: the H100's small call).
    // Otherwise one blocking recv per read: the timeout is a socket option, set only when it changes
    // (the channel asks for the same heartbeat interval again and again), so a read costs one syscall.
    const bool look = prepare_read_timeout(fd_, timeout, &timeout_);
    for (;;) {
      ssize_t r = ::recv(fd_, buf, n, look ? MSG_DONTWAIT : 0);
      if (r > 0) {
        traffic().read.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
        return r;
      }
      if (r == 0) return kBroken;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return kTimedOut;
      return kBroken;
    }
  }

  void shutdown() override { ::shutdown(fd_, SHUT_RDWR); }

 private:
  int fd_;
  bool owns_fd_;
  std::chrono::milliseconds timeout_ = kForever;
};

// One direction of a memory pair.
struct Pipe {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<uint8_t> bytes;
  bool closed = false;
};

struct PairState {
  Pipe dir[2];
  size_t capacity;
  void close_both() {
    for (Pipe& p : dir) {
      std::lock_guard<std::mutex> lock(p.mu);
      p.closed = true;
      p.cv.notify_all();
    }
  }
};

class MemoryTransport : public Transport {
 public:
  MemoryTransport(std::shared_ptr<PairState> s, int side) : s_(std::move(s)), in_(s_->dir[side]), out_(s_->dir[1 - side]) {}
  ~MemoryTransport() override { s_->close_both(); }

  bool write(const iovec* iov, int count) override {
    std::unique_lock<std::mutex> lock(out_.mu);
    for (int i = 0; i < count; ++i) {
      const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      size_t left = iov[i].iov_len;
      while (left) {
        out_.cv.wait(lock, [&] { return out_.closed || out_.bytes.size() < s_->capacity; });
        if (out_.closed) return false;
        size_t take = std::min(left, s_->capacity - out_.bytes.size());
        out_.bytes.insert(out_.bytes.end(), p, p + take);
        p += take;
        left -= take;
        out_.cv.notify_all();
      }
    }
    return true;
  }

  ssize_t read_some(void* buf, size_t n, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(in_.mu);
    auto ready = [&] { return in_.closed || !in_.bytes.empty(); };
    if (timeout == kForever) {
      in_.cv.wait(lock, ready);
    } else if (!in_.cv.wait_for(lock, timeout, ready)) {
      return kTimedOut;
    }
    if (in_.bytes.empty()) return kBroken;
    size_t take = std::min(n, in_.bytes.size());
    std::copy_n(in_.bytes.begin(), take, static_cast<uint8_t*>(buf));
    in_.bytes.erase(in_.bytes.begin(), in_.bytes.begin() + static_cast<long>(take));
    in_.cv.notify_all();
    return static_cast<ssize_t>(take);
  }

  void shutdown() override { s_->close_both(); }

 private:
  std::shared_ptr<PairState> s_;
  Pipe& in_;
  Pipe& out_;
};

}  // namespace

std::unique_ptr<Transport> socket_transport(int fd, bool owns_fd) {
  return std::make_unique<SocketTransport>(fd, owns_fd);
}

std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> memory_pair(size_t capacity) {
  auto s = std::make_shared<PairState>();
  s->capacity = std::max<size_t>(capacity, 1);
  return {std::make_unique<MemoryTransport>(s, 0), std::make_unique<MemoryTransport>(s, 1)};
}

void set_keepalive(int fd, std::chrono::seconds idle, std::chrono::seconds interval, int probes) {
  int one = 1, idle_s = static_cast<int>(idle.count()), interval_s = static_cast<int>(interval.count());
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

void set_user_timeout(int fd, std::chrono::milliseconds timeout) {
  unsigned ms = static_cast<unsigned>(timeout.count());
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

void set_liveness(int fd) {
  set_keepalive(fd);
  set_user_timeout(fd);
}

Backoff::Backoff(std::chrono::milliseconds first, std::chrono::milliseconds cap, uint64_t seed)
    : base_(first), cap_(cap), rng_(seed ? seed : std::random_device{}()) {}

std::chrono::milliseconds Backoff::next() {
  auto wait = std::min(base_, cap_);
  base_ = std::min(base_ * 2, cap_);
  // Half fixed, half random: never less than half the nominal wait, so the doubling still holds.
  long long half = wait.count() / 2;
  long long jitter = half > 0 ? static_cast<long long>(rng_() % static_cast<uint64_t>(half + 1)) : 0;
  return std::chrono::milliseconds(wait.count() - half + jitter);
}

int connect_before(const net::Address& addr, Clock::time_point deadline, std::string* err) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  int cause = 0;
  int fd = net::connect_tcp(addr, err, static_cast<int>(std::clamp<long long>(left, 0, INT32_MAX)), &cause);
  if (fd < 0 && cause) {
    *err = std::strerror(cause);  // dial() names the address itself
    if (!err->empty()) (*err)[0] = static_cast<char>(std::tolower(static_cast<unsigned char>((*err)[0])));
  }
  return fd;
}

int dial(const net::Address& addr, const DialOptions& options, const DialSetup& setup, std::string* err) {
  const auto start = Clock::now();
  const auto deadline = start + options.total;
  Backoff backoff(options.first_wait, options.max_wait);
  std::string cause;
  for (int attempt = 1;; ++attempt) {
    int fd = connect_before(addr, deadline, &cause);
    if (fd >= 0) {
      std::string why;
      Attempt a = setup ? setup(fd, deadline, &why) : Attempt::kDone;
      if (a == Attempt::kDone) return fd;
      ::close(fd);
      if (a == Attempt::kGiveUp) {
        *err = why;
        return -1;
      }
      cause = why;
    }
    auto wait = backoff.next();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= std::chrono::milliseconds(0)) {
      auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      *err = log::format("cannot reach %s at %s after %d attempts in %.1f s: %s; %s", options.peer.c_str(),
                         addr.str().c_str(), attempt, took / 1000.0, cause.c_str(), options.fix.c_str());
      return -1;
    }
    wait = std::min(wait, left);
    if (options.log_attempts)
      log::info("cannot reach %s at %s (attempt %d): %s; trying again in %.2f s (%.0f s left)", options.peer.c_str(),
                addr.str().c_str(), attempt, cause.c_str(), wait.count() / 1000.0, left.count() / 1000.0);
    std::this_thread::sleep_for(wait);
  }
}

}  // namespace rgpu::proto
