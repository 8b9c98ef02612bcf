// Reading and writing frames (protocol/messages.h) on a socket. Reading validates the header
// before a single payload byte is accepted: a length over the caller's limit is refused with a
// reason, never allocated.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/messages.h"
#include "protocol/transport.h"

namespace rgpu::proto {

enum class ReadResult { kOk, kClosed, kError };

// The same over a Transport (a TLS stream, or a socket): what the handshake and what a server
// sends behind it use. Reads wait until `deadline` at most (max: as the stream waits).
ReadResult read_frame(Transport& t, uint32_t max_payload, FrameHeader* h, std::vector<uint8_t>* payload,
                      std::string* why, Clock::time_point deadline = Clock::time_point::max());
// Reads exactly n bytes from t, waiting until `deadline` at most. kClosed when the stream ended
// before the first byte; kError (with *why) on a timeout or a break part-way.
ReadResult read_exact(Transport& t, void* dst, size_t n, Clock::time_point deadline, std::string* why);
bool write_frame(Transport& t, uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const void* a,
                 size_t a_len);

// Reads one header. kClosed on orderly EOF before any byte; kError (with *why) on a short read
// or a length over max_payload.
ReadResult read_header(int fd, uint32_t max_payload, FrameHeader* h, std::string* why);
// Reads a header and its payload into *payload.
ReadResult read_frame(int fd, uint32_t max_payload, FrameHeader* h, std::vector<uint8_t>* payload, std::string* why);

// Writes one frame: header, then the concatenation of the parts. Returns false if the peer is gone.
bool write_frame(int fd, uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const void* a,
                 size_t a_len, const void* b = nullptr, size_t b_len = 0);

inline FrameHeader make_header(uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id,
                               size_t length) {
  return FrameHeader{static_cast<uint32_t>(length), op, flags, request_id, thread_id};
}

}  // namespace rgpu::proto

namespace rgpu::proto {

// Reads frames from a socket through a buffer, so a burst of small frames (a batch of launches)
// costs one read(2), not two per frame. Payloads larger than the buffer are read straight into
// their own vector.
class FrameReader {
 public:
  explicit FrameReader(int fd, uint32_t max_payload, size_t buffer_bytes = 1 << 20)
      : fd_(fd), max_payload_(max_payload), buf_(buffer_bytes) {}
  ReadResult next(FrameHeader* h, Bytes* payload, std::string* why);
  // Like next(), for frames whose payload ends in bulk bytes the caller puts in place itself (an
  // upload into a tensor, read from the socket straight into it): a frame longer than head_max
  // gets only its first head_max bytes in *payload, and *rest says how many more belong to it,
  // to be taken with read_rest() before the next call (rest is 0 for shorter frames).
  ReadResult next_head(FrameHeader* h, Bytes* payload, size_t head_max, size_t* rest, std::string* why);
  // The next n bytes of the current frame, into dst (those already buffered first, the rest
  // straight from the socket). False (with *why) if the connection broke.
  bool read_rest(void* dst, size_t n, std::string* why);

  // How long the reader polls an idle socket before it sleeps in read(2).
  static constexpr std::chrono::microseconds kSpin{50};

  // When nonzero, a frame begun must arrive whole within frame_time plus a second per frame_rate
  // bytes of its payload, counted from its first stall; past it next() fails, saying so (a peer
  // that stops partway through a frame cannot hold the reader; ChannelOptions::frame_time is the
  // channel's same bound).
  std::chrono::milliseconds frame_time{0};
  uint64_t frame_rate = 1 << 20;

 private:
  // Ensures at least n bytes are buffered (n <= buffer size). kClosed only at a frame boundary.
  ReadResult fill(size_t n, bool at_boundary, std::string* why);

  // Waits until fd_ is readable; false (with *why) past the current frame's deadline.
  bool wait_mid_frame(size_t payload_left, std::string* why);

  int fd_;
  uint32_t max_payload_;
  std::chrono::steady_clock::time_point frame_deadline_ = std::chrono::steady_clock::time_point::max();
  std::vector<uint8_t> buf_;
  size_t begin_ = 0, end_ = 0;
};

}  // namespace rgpu::proto
