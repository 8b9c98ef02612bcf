// rgpu-delay-proxy's engine: a TCP relay that adds a fixed one-way delay (and optionally a
// bandwidth cap) in each direction, so benchmarks can see rgpu at 1 ms or 30 ms of round-trip
// time on one machine without `tc netem`. Each accepted connection gets a fresh connection to the
// target; per direction a reader stamps every chunk it reads and queues it, and a writer sends it
// no earlier than stamp + one_way_delay, in order, paced by the optional cap. No sleeping per byte.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/net.h"

namespace rgpu::delay_proxy {

struct Options {
  net::Address target;
  // Added to each direction; a round trip through the proxy gains twice this.
  std::chrono::microseconds one_way_delay{0};
  // Per direction, in bits per second (1e6 per Mbit/s); 0 = no cap.
  double bandwidth_bps = 0;
};

// The most bytes queued in one direction before the reader stops reading (TCP backpressure then
// slows the sender). 64 MiB covers a 30 ms one-way delay at over 15 Gbit/s.
constexpr size_t kMaxQueuedBytes = 64u << 20;

class Proxy {
 public:
  // Takes ownership of listen_fd, a socket already listening (net::listen_tcp).
  Proxy(int listen_fd, Options options);
  // Stops accepting, closes every relayed connection, and joins all threads.
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Accepts and relays until stop(). Call from one thread.
  void run();
  // Safe from any thread; makes run() return.
  void stop();
  // The port the listening socket is bound to (useful after listening on port 0).
  uint16_t port() const;

 private:
  struct Connection;
  void reap(bool all);

  int listen_fd_;
  Options options_;
  std::mutex mu_;
  bool stopping_ = false;
  std::list<std::shared_ptr<Connection>> connections_;
};

// Relays one connection until either side closes or fails, then shuts both sockets down (the
// other side sees the close too) and returns. The caller closes the fds. Another thread may end a
// relay early with shutdown(fd, SHUT_RDWR) on either fd.
void relay(int client_fd, int target_fd, const Options& options);

}  // namespace rgpu::delay_proxy
