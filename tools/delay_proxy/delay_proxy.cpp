// Implementation of delay_proxy.h: four threads per connection (a reader and a writer per
// direction) around two timestamped queues.
#include "tools/delay_proxy/delay_proxy.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <vector>

#include "common/log.h"

namespace rgpu::delay_proxy {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 256 << 10;
// Under a bandwidth cap, writes go out in pieces this large, so the pacing stays smooth: the
// bucket holds at most one piece, i.e. bursts are at most 16 KiB above the rate.
constexpr size_t kPacedPiece = 16 << 10;

struct Chunk {
  Clock::time_point due;
  std::vector<uint8_t> bytes;  // empty = end of stream
};

// One direction: the reader pushes, the writer pops once a chunk is due.
class Pipe {
 public:
  // Blocks while the queue is over kMaxQueuedBytes; returns false once closed.
  bool push(Chunk c) {
    std::unique_lock lk(mu_);
    space_.wait(lk, [&] { return closed_ || queued_ < kMaxQueuedBytes; });
    if (closed_) return false;
    queued_ += c.bytes.size();
    q_.push_back(std::move(c));
    ready_.notify_one();
    return true;
  }
  // Waits for the next chunk and its due time. Returns false once closed.
  bool pop(Chunk* out) {
    std::unique_lock lk(mu_);
    for (;;) {
      if (closed_) return false;
      if (!q_.empty()) {
        if (Clock::now() >= q_.front().due) break;
        ready_.wait_until(lk, q_.front().due);
      } else {
        ready_.wait(lk);
      }
    }
    *out = std::move(q_.front());
    q_.pop_front();
    queued_ -= out->bytes.size();
    space_.notify_one();
    return true;
  }
  // Wakes both ends for good; queued bytes are dropped.
  void close() {
    std::lock_guard lk(mu_);
    closed_ = true;
    ready_.notify_all();
    space_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Chunk> q_;
  size_t queued_ = 0;
  bool closed_ = false;
};

// Ends the whole connection: both sockets see EOF/errors, both pipes wake.
struct Teardown {
  int a, b;
  Pipe* p1;
  Pipe* p2;
  void operator()() const {
    ::shutdown(a, SHUT_RDWR);
    ::shutdown(b, SHUT_RDWR);
    p1->close();
    p2->close();
  }
};

void read_side(int src, Pipe* pipe, std::chrono::microseconds delay) {
  for (;;) {
    std::vector<uint8_t> buf(kReadChunk);
    ssize_t n = ::read(src, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    auto due = Clock::now() + delay;
    if (n <= 0) {  // EOF or error: the close itself travels with the same delay
      pipe->push(Chunk{due, {}});
      return;
    }
    buf.resize(static_cast<size_t>(n));
    if (!pipe->push(Chunk{due, std::move(buf)})) return;
  }
}

void write_side(int dst, Pipe* pipe, double bytes_per_second, const Teardown& teardown) {
  Clock::time_point next_free{};  // token bucket: when the link is free for the next byte
  Chunk c;
  while (pipe->pop(&c)) {
    if (c.bytes.empty()) break;  // the source closed: close both sides
    if (bytes_per_second <= 0) {
      if (!net::write_full(dst, c.bytes.data(), c.bytes.size())) break;
      continue;
    }
    bool ok = true;
    for (size_t off = 0; ok && off < c.bytes.size(); off += kPacedPiece) {
      size_t n = std::min(kPacedPiece, c.bytes.size() - off);
      auto start = std::max(Clock::now(), next_free);
      std::this_thread::sleep_until(start);
      ok = net::write_full(dst, c.bytes.data() + off, n);
      next_free = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(n / bytes_per_second));
    }
    if (!ok) break;
  }
  teardown();
}

}  // namespace

void relay(int client_fd, int target_fd, const Options& options) {
  Pipe up, down;  // up: client -> target; down: target -> client
  Teardown teardown{client_fd, target_fd, &up, &down};
  double bytes_per_second = options.bandwidth_bps / 8;
  std::thread threads[] = {
      std::thread(read_side, client_fd, &up, options.one_way_delay),
      std::thread(write_side, target_fd, &up, bytes_per_second, std::cref(teardown)),
      std::thread(read_side, target_fd, &down, options.one_way_delay),
      std::thread(write_side, client_fd, &down, bytes_per_second, std::cref(teardown)),
  };
  for (auto& t : threads) t.join();
}

struct Proxy::Connection {
  int client_fd = -1, target_fd = -1;
  std::thread thread;
  std::atomic<bool> done{false};
};

Proxy::Proxy(int listen_fd, Options options) : listen_fd_(listen_fd), options_(std::move(options)) {}

Proxy::~Proxy() {
  stop();
  reap(/*all=*/true);
  ::close(listen_fd_);
}

uint16_t Proxy::port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void Proxy::stop() {
  std::lock_guard lk(mu_);
  if (stopping_) return;
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  for (auto& c : connections_) {
    ::shutdown(c->client_fd, SHUT_RDWR);
    ::shutdown(c->target_fd, SHUT_RDWR);
  }
}

// Joins finished connections (or all of them) and closes their fds. The fds are closed only here,
// under no lock contention with stop(), after the relay has returned, so stop() never shuts down
// a reused fd number.
void Proxy::reap(bool all) {
  std::list<std::shared_ptr<Connection>> finished;
  {
    std::lock_guard lk(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (all || (*it)->done) {
        finished.push_back(*it);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    c->thread.join();
    ::close(c->client_fd);
    ::close(c->target_fd);
  }
}

void Proxy::run() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    reap(/*all=*/false);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::lock_guard lk(mu_);
      if (stopping_) return;
      log::error("accept failed: %s; stopping", std::strerror(errno));
      return;
    }
    net::set_nodelay(fd);
    std::string peer = net::peer_name(fd), err;
    int target = net::connect_tcp(options_.target, &err);
    if (target < 0) {
      log::error("connection from %s dropped: %s (is the target running?)", peer.c_str(),
                 err.c_str());
      ::close(fd);
      continue;
    }
    log::info("%s connected, relaying to %s", peer.c_str(), options_.target.str().c_str());
    auto c = std::make_shared<Connection>();
    c->client_fd = fd;
    c->target_fd = target;
    std::lock_guard lk(mu_);
    if (stopping_) {
      ::close(fd);
      ::close(target);
      return;
    }
    c->thread = std::thread([c, this, peer] {
      relay(c->client_fd, c->target_fd, options_);
      log::info("%s closed", peer.c_str());
      c->done = true;
    });
    connections_.push_back(std::move(c));
  }
}

}  // namespace rgpu::delay_proxy
