// Implementation of client/progress.h.
#include "client/progress.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "common/env.h"
#include "protocol/transport.h"

namespace rgpu::client::progress {
namespace {

using Clock = std::chrono::steady_clock;

// A transfer of less than this does not start or extend a run: small copies are never slow.
constexpr uint64_t kMinBytes = 64 << 10;
// A run ends when no transfer of its kind has been under way for this long.
constexpr auto kRunGap = std::chrono::seconds(1);
constexpr auto kTick = std::chrono::milliseconds(200);

struct Run {
  bool live = false;
  bool shown = false;
  Clock::time_point start, last_end, last_line;
  uint64_t base = 0;      // the traffic counter when the run began
  uint64_t finished = 0;  // bytes of the run's finished transfers
  uint64_t active_bytes = 0;
  int active = 0;
  unsigned count = 0;
};

struct State {
  std::mutex mu;
  bool tty = false;
  bool ticker = false;
  Run runs[3];
};
State& state() {
  static State* s = new State;  // leaked: the ticker and exit handlers use it until the end
  return *s;
}

bool enabled() {
  static const bool on = [] {
    const int setting = env::get().progress;
    return setting == 1 || (setting < 0 && isatty(STDERR_FILENO));
  }();
  return on;
}

uint64_t counter(Kind k) {
  const proto::Traffic& t = proto::traffic();
  return (k == Kind::kFromGpu ? t.read : t.written).load(std::memory_order_relaxed);
}

const char* what(Kind k) {
  switch (k) {
    case Kind::kImages: return "sending kernel images";
    case Kind::kToGpu: return "copying to the GPU";
    case Kind::kFromGpu: return "copying from the GPU";
  }
  return "";
}

double mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

void emit(const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(STDERR_FILENO, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The run's line, without an end: "rgpu: sending kernel images: 45.0 of 312.0 MB (14%), 3.1 MB/s, 3 images".
std::string line(Kind k, const Run& r, Clock::time_point now, bool done) {
  const uint64_t total = r.finished + r.active_bytes;
  // Bytes handed to the kernel may wait in socket buffers (or a relay's) for a while: the transfers
  // under way are shown at most 99% done until they return.
  const uint64_t moved = done ? r.finished : std::min(counter(k) - r.base, r.finished + r.active_bytes / 100 * 99);
  const double s = std::max(std::chrono::duration<double>(now - r.start).count(), 1e-3);
  char buf[256];
  if (done)
    std::snprintf(buf, sizeof buf, "rgpu: %s: done, %.1f MB in %.1f s (%.1f MB/s)", what(k), mb(moved), s, mb(moved) / s);
  else
    std::snprintf(buf, sizeof buf, "rgpu: %s: %.1f of %.1f MB (%.0f%%), %.1f MB/s", what(k), mb(moved), mb(total),
                  total ? 100.0 * static_cast<double>(moved) / static_cast<double>(total) : 100.0, mb(moved) / s);
  std::string out = buf;
  if (k == Kind::kImages) out += ", " + std::to_string(r.count) + (r.count == 1 ? " image" : " images");
  return out;
}

// With the lock held: ends run k, printing its last line if it was shown.
void end_run(State& st, Kind k, Clock::time_point now) {
  Run& r = st.runs[static_cast<int>(k)];
  if (r.shown) emit((st.tty ? "\r" : "") + line(k, r, r.active ? now : r.last_end, true) + (st.tty ? "\x1b[K\n" : "\n"));
  r = Run{};
}

void finish_all() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  for (int k = 0; k < 3; ++k)
    if (st.runs[k].live) end_run(st, static_cast<Kind>(k), Clock::now());
}

[[noreturn]] void tick() {
  State& st = state();
  for (;;) {
    std::this_thread::sleep_for(kTick);
    std::lock_guard<std::mutex> lock(st.mu);
    const auto now = Clock::now();
    for (int i = 0; i < 3; ++i) {
      Run& r = st.runs[i];
      const Kind k = static_cast<Kind>(i);
      if (!r.live) continue;
      if (r.active == 0 && now - r.last_end >= kRunGap) {
        end_run(st, k, now);
        continue;
      }
      if (!r.shown && r.active > 0 && now - r.start >= kShowAfter) r.shown = true;
      if (!r.shown) continue;
      if (st.tty) {
        emit("\r" + line(k, r, now, false) + "\x1b[K");
      } else if (r.last_line == Clock::time_point{} || now - r.last_line >= kLineEvery) {
        emit(line(k, r, now, false) + "\n");
        r.last_line = now;
      }
    }
  }
}

}  // namespace

Transfer::Transfer(Kind kind, uint64_t bytes) : kind_(kind) {
  if (bytes < kMinBytes || !enabled()) return;
  on_ = true;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.ticker) {
    st.ticker = true;
    st.tty = isatty(STDERR_FILENO);
    std::thread(tick).detach();
    std::atexit(finish_all);  // a run shown on a terminal ends its line before the program's last words
  }
  Run& r = st.runs[static_cast<int>(kind)];
  if (!r.live) {
    r.live = true;
    r.start = Clock::now();
    r.base = counter(kind);
  }
  ++r.active;
  ++r.count;
  r.active_bytes += bytes;
  bytes_ = bytes;
}

Transfer::~Transfer() {
  if (!on_) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  Run& r = st.runs[static_cast<int>(kind_)];
  if (!r.live) return;  // ended at exit meanwhile
  --r.active;
  r.active_bytes -= bytes_;
  r.finished += bytes_;
  r.last_end = Clock::now();
  // Nothing under way: the line is erased, so that what the program prints next starts a line of
  // its own; the next tick draws it again if the run goes on, or prints its end.
  if (st.tty && r.shown && r.active == 0) emit("\r\x1b[K");
}

}  // namespace rgpu::client::progress
