// Implementation of protocol/frame.h.
#include "protocol/frame.h"

#include <poll.h>

#include <sys/uio.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/log.h"
#include "common/net.h"

namespace rgpu::proto {

ReadResult read_header(int fd, uint32_t max_payload, FrameHeader* h, std::string* why) {
  ssize_t r = net::read_full(fd, h, sizeof *h);
  if (r == 0) return ReadResult::kClosed;
  if (r < 0) {
    *why = (errno == EAGAIN || errno == EWOULDBLOCK) ? "timed out waiting for the peer to send a message"
                                                     : "connection broke in the middle of a frame header";
    return ReadResult::kError;
  }
  if (h->length > max_payload) {
    *why = log::format("frame length %u is over the limit of %u bytes (op %u)", h->length, max_payload, h->op);
    return ReadResult::kError;
  }
  return ReadResult::kOk;
}

ReadResult read_frame(int fd, uint32_t max_payload, FrameHeader* h, std::vector<uint8_t>* payload,
                      std::string* why) {
  ReadResult rr = read_header(fd, max_payload, h, why);
  if (rr != ReadResult::kOk) return rr;
  payload->resize(h->length);
  if (h->length && net::read_full(fd, payload->data(), h->length) != static_cast<ssize_t>(h->length)) {
    *why = log::format("connection broke in the middle of a %u-byte frame (op %u)", h->length, h->op);
    return ReadResult::kError;
  }
  return ReadResult::kOk;
}

bool write_frame(int fd, uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const void* a,
                 size_t a_len, const void* b, size_t b_len) {
  FrameHeader h = make_header(op, flags, request_id, thread_id, a_len + b_len);
  iovec iov[3] = {{&h, sizeof h}, {const_cast<void*>(a), a_len}, {const_cast<void*>(b), b_len}};
  return net::writev_full(fd, iov, b_len ? 3 : 2);
}

ReadResult read_exact(Transport& t, void* dst, size_t n, Clock::time_point deadline, std::string* why) {
  auto* p = static_cast<uint8_t*>(dst);
  const size_t want = n;
  while (n) {
    auto timeout = kForever;
    if (deadline != Clock::time_point::max()) {
      timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (timeout.count() <= 0) {
        *why = "timed out waiting for the peer to send a message";
        return ReadResult::kError;
      }
    }
    ssize_t r = t.read_some(p, n, timeout);
    if (r == Transport::kTimedOut) {
      if (deadline != Clock::time_point::max()) continue;
      *why = "timed out waiting for the peer to send a message";
      return ReadResult::kError;
    }
    if (r <= 0) {
      if (n == want) return ReadResult::kClosed;
      *why = "the connection broke in the middle of a message";
      return ReadResult::kError;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return ReadResult::kOk;
}

ReadResult read_frame(Transport& t, uint32_t max_payload, FrameHeader* h, std::vector<uint8_t>* payload,
                      std::string* why, Clock::time_point deadline) {
  ReadResult rr = read_exact(t, h, sizeof *h, deadline, why);
  if (rr != ReadResult::kOk) return rr;
  if (h->length > max_payload) {
    *why = log::format("frame length %u is over the limit of %u bytes (op %u)", h->length, max_payload, h->op);
    return ReadResult::kError;
  }
  payload->resize(h->length);
  if (!h->length) return ReadResult::kOk;
  rr = read_exact(t, payload->data(), h->length, deadline, why);
  if (rr == ReadResult::kClosed) {
    *why = log::format("connection broke in the middle of a %u-byte frame (op %u)", h->length, h->op);
    return ReadResult::kError;
  }
  return rr;
}

bool write_frame(Transport& t, uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const void* a,
                 size_t a_len) {
  FrameHeader h = make_header(op, flags, request_id, thread_id, a_len);
  iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(a), a_len}};
  return t.write(iov, a_len ? 2 : 1);
}

}  // namespace rgpu::proto

namespace rgpu::proto {

ReadResult FrameReader::fill(size_t n, bool at_boundary, std::string* why) {
  if (end_ - begin_ >= n) return ReadResult::kOk;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // Busy-poll for a short while before blocking: the next frame of an active peer usually comes
  // within microseconds, and a blocking read that sleeps costs a thread wake-up (several µs) on
  // every call. After kSpin without data, block.
  auto deadline = std::chrono::steady_clock::now() + kSpin;
  int polls = 0;
  while (end_ < n) {
    ssize_t r = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((++polls & 63) != 0 || std::chrono::steady_clock::now() < deadline) continue;
      if ((end_ > 0 || !at_boundary) && !wait_mid_frame(0, why)) return ReadResult::kError;
      r = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
    }
    if (r > 0) {
      end_ += static_cast<size_t>(r);
    } else if (r == 0) {
      if (at_boundary && end_ == 0) return ReadResult::kClosed;
      *why = "connection broke in the middle of a frame";
      return ReadResult::kError;
    } else if (errno != EINTR) {
      *why = std::string("read failed: ") + std::strerror(errno);
      return ReadResult::kError;
    }
  }
  return ReadResult::kOk;
}

ReadResult FrameReader::next(FrameHeader* h, Bytes* payload, std::string* why) {
  size_t rest = 0;
  return next_head(h, payload, SIZE_MAX, &rest, why);
}

bool FrameReader::wait_mid_frame(size_t payload_left, std::string* why) {
  if (frame_time.count() <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  if (frame_deadline_ == std::chrono::steady_clock::time_point::max())
    frame_deadline_ = now + frame_time + std::chrono::seconds(payload_left / std::max<uint64_t>(frame_rate, 1));
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(frame_deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      *why = log::format("a frame stopped partway (not whole within %.1f s of its start)", frame_time.count() / 1000.0);
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
    if (r > 0 || (r < 0 && errno != EINTR)) return true;  // readable, or a failure the read reports
  }
}

ReadResult FrameReader::next_head(FrameHeader* h, Bytes* payload, size_t head_max, size_t* rest, std::string* why) {
  *rest = 0;
  frame_deadline_ = std::chrono::steady_clock::time_point::max();  // a new frame: its clock starts at its first stall
  ReadResult rr = fill(sizeof *h, true, why);
  if (rr != ReadResult::kOk) return rr;
  std::memcpy(h, buf_.data() + begin_, sizeof *h);
  begin_ += sizeof *h;
  if (h->length > max_payload_) {
    *why = log::format("frame length %u is over the limit of %u bytes (op %u)", h->length, max_payload_, h->op);
    return ReadResult::kError;
  }
  const size_t head = std::min<size_t>(h->length, head_max);
  payload->resize(head);
  if (!read_rest(payload->data(), head, why)) {
    *why = why->rfind("a frame stopped partway", 0) == 0
               ? log::format("%s: a %u-byte frame (op %u)", why->c_str(), h->length, h->op)
               : log::format("connection broke in the middle of a %u-byte frame (op %u)", h->length, h->op);
    return ReadResult::kError;
  }
  *rest = h->length - head;
  return ReadResult::kOk;
}

bool FrameReader::read_rest(void* dst, size_t n, std::string* why) {
  size_t have = std::min(end_ - begin_, n);
  if (have) std::memcpy(dst, buf_.data() + begin_, have);
  begin_ += have;
  auto* out = static_cast<uint8_t*>(dst);
  while (have < n) {
    if (frame_time.count() > 0 && !wait_mid_frame(n - have, why)) return false;
    const ssize_t r = ::read(fd_, out + have, n - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *why = "connection broke in the middle of a frame";
      return false;
    }
    have += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace rgpu::proto
