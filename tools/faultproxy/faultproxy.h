// rgpu-faultproxy's engine: a TCP relay between a listen address and a target that breaks each
// connection in one chosen way at a chosen moment, so tests can see what rgpu does when the
// network fails: cut (both sockets closed: FIN), reset (RST), stall (nothing read or forwarded
// either way, sockets kept open: the sender's buffers fill), black hole (everything read and
// dropped, sockets kept open: the sender never notices), half close (the target's direction ends,
// the client's goes on). The moment is after N bytes forwarded from the client, or N ms after the
// connection was accepted, whichever comes first, or when the test asks (strike_now); only the first `faulty_connections` connections
// get the fault (0: all), so a reconnect can be made to succeed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/net.h"

namespace rgpu::faultproxy {

enum class Fault { kNone, kCut, kReset, kStall, kBlackhole, kHalfClose };

// "cut", "reset", "stall", "blackhole", "half-close", "none"; false for anything else.
bool parse_fault(const std::string& s, Fault* out);
const char* fault_name(Fault f);

struct Options {
  net::Address target;
  Fault fault = Fault::kNone;
  // The fault strikes after this many bytes went from client to target (0: not by bytes) ...
  uint64_t after_bytes = 0;
  // With after_bytes_max above after_bytes: each connection's point is drawn at random from
  // [after_bytes, after_bytes_max] (seeded: the same seed cuts at the same points).
  uint64_t after_bytes_max = 0;
  uint64_t seed = 1;
  // ... or this long after the connection was accepted (0: not by time); with neither, at once.
  std::chrono::milliseconds after_ms{0};
  // ... or when strike_now() is called (rgpu-faultproxy: on SIGUSR1), so a test can break a
  // connection at the moment it chooses; with none of the three, at once.
  bool on_request = false;
  // How many connections get the fault, counted from the first (0: every one).
  int faulty_connections = 0;
  // Connections past this many are closed at once, never relayed (a server that went away for
  // good); 0: no limit.
  int max_connections = 0;
};

class Proxy {
 public:
  // Takes ownership of listen_fd, a socket already listening (net::listen_tcp).
  Proxy(int listen_fd, Options options);
  // Stops accepting, closes every relayed connection, joins all threads.
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Accepts and relays until stop(). Call from one thread.
  void run();
  void stop();
  uint16_t port() const;
  // Connections whose fault has struck (tests wait for it).
  int faults_struck() const { return struck_.load(); }
  // With Options::on_request: the fault strikes every faulty connection open now (within 100 ms).
  // Async-signal-safe.
  void strike_now() { strike_requests_.fetch_add(1); }

 private:
  void relay(int client_fd, bool faulty, uint64_t after_bytes);

  int listen_fd_;
  Options options_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> struck_{0};
  std::atomic<int> strike_requests_{0};
  static_assert(std::atomic<int>::is_always_lock_free, "strike_now is called from a signal handler");
  std::mutex mu_;
  std::list<std::thread> threads_;
};

}  // namespace rgpu::faultproxy
