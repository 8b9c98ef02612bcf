// Implementation of protocol/frame.h.
#include "protocol/frame.h"

#include <sys/uio.h>

#include "common/log.h"
#include "common/net.h"

namespace rgpu::proto {

ReadResult read_header(int fd, uint32_t max_payload, FrameHeader* h, std::string* why) {
  ssize_t r = net::read_full(fd, h, sizeof *h);
  if (r == 0) return ReadResult::kClosed;
  if (r < 0) {
    *why = "connection broke in the middle of a frame header";
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

}  // namespace rgpu::proto
