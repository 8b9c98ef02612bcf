// What a reliable channel (protocol/channel.h) runs over: a byte stream that can break. Two kinds:
// a connected TCP socket, and an in-memory pair for tests, so the channel's logic is tested once
// over both. Also the socket plumbing the channel's users need: TCP keepalive and
// TCP_USER_TIMEOUT (a dead peer is noticed by the kernel too, not only by heartbeats), and
// connecting with exponential backoff and jitter inside a total time limit.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "common/net.h"

namespace rgpu::proto {

using Clock = std::chrono::steady_clock;
inline constexpr std::chrono::milliseconds kForever = std::chrono::milliseconds::max();

// Bytes this process's transports (sockets and TLS streams, all connections together) have handed
// to the kernel and taken from it so far: how far a long transfer has come (client/progress.h).
struct Traffic {
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> read{0};
};
Traffic& traffic();

// How a socket transport's read waits (the plain socket's and the TLS stream's): a zero timeout is
// a look, one recv with MSG_DONTWAIT, and leaves the socket as it is (SO_RCVTIMEO would round zero
// up to a millisecond of blocking); any other sets SO_RCVTIMEO to it (kForever: none) when it
// differs from *current (the socket's, kForever for a fresh one), so that a read is one blocking
// recv. True for a look.
bool prepare_read_timeout(int fd, std::chrono::milliseconds timeout, std::chrono::milliseconds* current);

// A byte stream between two peers. write() may be called by one thread while another is in
// read_some(); shutdown() from any thread at any time.
class Transport {
 public:
  // What read_some returns besides a byte count (> 0).
  static constexpr ssize_t kTimedOut = -2;
  static constexpr ssize_t kBroken = -1;  // end of stream or an error: this connection is over

  virtual ~Transport() = default;
  // Writes all of the buffers in order. False: the connection is broken (some bytes may have
  // reached the peer, which is why the channel numbers its frames).
  virtual bool write(const iovec* iov, int count) = 0;
  // write() for a caller that keeps the buffers (every one iov points into) alive for as long as
  // `keep` lives: the transport may keep `keep`, hand a large write to a thread of its own and
  // return before the bytes are out, so that the caller prepares the next while this one is
  // encrypted and sent (TlsTransport; issue 17). Order with other writes is kept. A failure found
  // after it returned makes a later write return false and ends the stream for the reader.
  // Default: write(), at once.
  virtual bool write_held(const iovec* iov, int count, std::shared_ptr<const void> keep) {
    (void)keep;
    return write(iov, count);
  }
  // Reads what has arrived, up to n bytes, waiting at most `timeout` (kForever: no limit) for the
  // first byte.
  virtual ssize_t read_some(void* buf, size_t n, std::chrono::milliseconds timeout) = 0;
  // Breaks the connection from this side: blocked and later reads and writes on this end fail at
  // once, and the peer sees the stream end.
  virtual void shutdown() = 0;
  // The TLS exporter value (RFC 8446 section 7.5) for `label`, 32 bytes, which both ends of one
  // TLS connection agree on and a relay that terminates TLS cannot reproduce: the handshake's and
  // the resume's proofs mix it in. False for a stream without TLS (their proofs stay as before).
  // A transport that wraps another must pass this on, or its proofs will not match the peer's.
  virtual bool export_key(const char* label, uint8_t out[32]) {
    (void)label;
    (void)out;
    return false;
  }
  // Why the stream broke when it knows more than that it closed (the TLS alert the peer sent);
  // "" otherwise.
  virtual std::string failure() const { return ""; }
};

// A connected socket; the transport owns fd and closes it (owns_fd false: the caller keeps it, as
// for a handshake whose socket is then given to the channel).
std::unique_ptr<Transport> socket_transport(int fd, bool owns_fd = true);

// Two connected in-memory ends. Each direction buffers at most `capacity` bytes (a writer past it
// waits, as on a socket whose peer does not read). shutdown() on either end ends both directions:
// bytes already buffered are still read, then reads report kBroken.
std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> memory_pair(size_t capacity = 4 << 20);

// TCP keepalive: probe after `idle` without traffic, every `interval`, give up after `probes`
// unanswered (60 s, 15 s, 3: a vanished peer is seen within 105 s even while nothing is sent).
void set_keepalive(int fd, std::chrono::seconds idle = std::chrono::seconds(60),
                   std::chrono::seconds interval = std::chrono::seconds(15), int probes = 3);
// TCP_USER_TIMEOUT: how long written data may stay unacknowledged by the peer's kernel before the
// connection is dropped. Default: the keepalive's own bound, so both agree.
void set_user_timeout(int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(105000));
// Both of the above with their defaults: what every rgpu connection gets.
void set_liveness(int fd);

// The waits between connection attempts: `first`, doubling to `cap`, each with jitter (a random
// part of up to half the wait, so many clients cut at once do not come back in lockstep).
class Backoff {
 public:
  explicit Backoff(std::chrono::milliseconds first = std::chrono::milliseconds(250),
                   std::chrono::milliseconds cap = std::chrono::milliseconds(10000), uint64_t seed = 0);
  // The wait before the next attempt.
  std::chrono::milliseconds next();

 private:
  std::chrono::milliseconds base_, cap_;
  std::mt19937_64 rng_;
};

// One TCP connect that gives up at `deadline` (a blackholed address would otherwise take the
// kernel's two minutes of SYN retries). -1 and a sentence naming the address and cause on failure.
int connect_before(const net::Address& addr, Clock::time_point deadline, std::string* err);

// What one attempt of dial() did.
enum class Attempt { kDone, kRetry, kGiveUp };

struct DialOptions {
  // Everything (every attempt, the waits and the `setup` of the one that succeeds) fits in this.
  std::chrono::milliseconds total = std::chrono::seconds(60);
  std::chrono::milliseconds first_wait = std::chrono::milliseconds(250);
  std::chrono::milliseconds max_wait = std::chrono::seconds(10);
  // Names the peer in messages ("rgpu-server").
  std::string peer = "rgpu-server";
  // Said after the cause in the final error: what the user can do.
  std::string fix = "is it running there, and does RGPU_SERVER name it? (RGPU_CONNECT_TIMEOUT sets how long to try)";
  // An info line per failed attempt; off for a probe whose failure is an answer (is_available).
  bool log_attempts = true;
};

// Runs on each connected socket (the handshake, or a resume): kDone keeps the socket, kRetry
// closes it and tries again (the peer went away mid-way), kGiveUp closes it and stops (the peer
// refused: a wrong token, an unknown session). *err says why in both failure cases.
using DialSetup = std::function<Attempt(int fd, Clock::time_point deadline, std::string* err)>;

// Connects to addr, retrying with Backoff until `setup` accepts a connection or options.total has
// passed. Logs an info line per failed attempt. Returns the fd, or -1 with *err naming the
// address, the last cause and options.fix.
int dial(const net::Address& addr, const DialOptions& options, const DialSetup& setup, std::string* err);

}  // namespace rgpu::proto
