// A connection for fuzz targets (protocol/transport.h): the peer's side is a fixed script of
// bytes, which reads take in order until it ends the stream; what the side under test writes is
// taken and dropped. A hostile peer's whole answer, without a socket, a thread or a timeout: a
// socket pair per input cost the handshake target a third of its time in the kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "protocol/transport.h"

namespace rgpu::fuzz {

class ScriptedTransport : public proto::Transport {
 public:
  ScriptedTransport(const uint8_t* data, size_t size) : bytes_(data, data + size) {}
  bool write(const iovec*, int) override { return !shut_; }
  ssize_t read_some(void* buf, size_t n, std::chrono::milliseconds) override {
    if (shut_ || at_ == bytes_.size()) return kBroken;
    n = std::min(n, bytes_.size() - at_);
    std::memcpy(buf, bytes_.data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  void shutdown() override { shut_ = true; }

 private:
  std::vector<uint8_t> bytes_;  // an exact-size copy: ASan sees a read past the script
  size_t at_ = 0;
  bool shut_ = false;
};

}  // namespace rgpu::fuzz
