// How far long transfers are, on stderr: the first run of a program at a large round-trip time
// sends hundreds of MB of kernel images, and large copies take as long as the network makes them.
// A transfer (one kernel-image upload, one host-device copy) is wrapped in a progress::Transfer;
// transfers of one kind that follow each other within a second make one run ("sending kernel
// images": 37 images, 120 MB so far). A run is shown once it has lasted kShowAfter while a
// transfer is under way, so quick ones print nothing: on a terminal one line updated in place
// (and ended when the run ends), otherwise a line every kLineEvery and one at the end.
//
// RGPU_PROGRESS (common/env.h): 1 always, 0 never, unset when stderr is a terminal. Bytes done
// come from the transports' counters (protocol/transport.h traffic()), so a single large frame
// shows progress as the kernel takes it; another thread's traffic at the same time counts too (the
// numbers are a progress bar, not an account).
#pragma once

#include <chrono>
#include <cstdint>

namespace rgpu::client::progress {

inline constexpr std::chrono::milliseconds kShowAfter{2000};
inline constexpr std::chrono::seconds kLineEvery{5};

enum class Kind { kImages, kToGpu, kFromGpu };

class Transfer {
 public:
  Transfer(Kind kind, uint64_t bytes);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

 private:
  bool on_ = false;
  Kind kind_;
  uint64_t bytes_ = 0;
};

}  // namespace rgpu::client::progress
