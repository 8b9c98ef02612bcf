// Implementation of client/stats.h.
#include "client/stats.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "client/runtime.h"
#include "common/env.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/nccl.h"

namespace rgpu::client::stats {
namespace {

// CUDA and control ops are indexed directly, NCCL's (from proto::kFirstNcclOp) follow them, and
// anything else (no such op today) shares the last slot.
constexpr size_t kCudaSlots = 1024;
constexpr size_t kNcclSlots = 64;
constexpr size_t kSlots = kCudaSlots + kNcclSlots + 1;
// Rows per list in the file.
constexpr size_t kTop = 20;
static_assert(op::kLast < kCudaSlots, "grow kCudaSlots");

size_t slot_of(uint16_t op) {
  if (op < kCudaSlots) return op;
  if (op >= proto::kFirstNcclOp && op < proto::kFirstNcclOp + kNcclSlots) return kCudaSlots + (op - proto::kFirstNcclOp);
  return kSlots - 1;
}

struct OpCounters {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> waited{0};
  std::atomic<uint64_t> total_us{0};
  std::atomic<uint64_t> max_us{0};
};

constexpr const char* kTimeNames[] = {"connect", "image_digest", "image_parse"};
static_assert(std::size(kTimeNames) == static_cast<size_t>(Time::kCount));

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// How long this process has been running, from /proc/self/stat's start time (field 22, clock
// ticks since boot) and CLOCK_BOOTTIME; 0 when it cannot be read.
uint64_t process_age_us() {
  FILE* f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strrchr(buf, ')');  // the command name may hold spaces; fields count from after it
  if (!p) return 0;
  unsigned long long start_ticks = 0;
  // After ")": field 3 (state) ... field 22 (starttime): skip 19 fields.
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &start_ticks) != 1)
    return 0;
  long hz = sysconf(_SC_CLK_TCK);
  timespec ts{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return 0;
  uint64_t now_us = uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
  uint64_t start_us = start_ticks * 1000000 / uint64_t(hz);
  return now_us > start_us ? now_us - start_us : 0;
}

struct Table {
  OpCounters ops[kSlots];
  std::atomic<uint64_t> time_us[static_cast<size_t>(Time::kCount)]{};
  std::atomic<uint64_t> process_start_to_connect_us{0};
  std::string path;  // copied here: env's statics may be gone by the time the handler runs
  pid_t pid = 0;
};

// Leaked on purpose (see the header). Written once under g_once, before any call is counted.
std::atomic<Table*> g_table{nullptr};
std::once_flag g_once;

void at_exit_write() { write_now(); }

std::string op_name(size_t slot) {
  if (slot == kSlots - 1) return "other";
  if (slot >= kCudaSlots) {
    const auto op = static_cast<uint16_t>(proto::kFirstNcclOp + (slot - kCudaSlots));
    if (const char* n = proto::wire::nccl_op_name(op)) return n;
    return "op:" + std::to_string(op);
  }
  if (const char* n = op::name(static_cast<uint16_t>(slot))) return n;
  if (slot < op::kFirst) return "control:" + std::to_string(slot);
  return "op:" + std::to_string(slot);
}

}  // namespace

void enable_from_env() {
  std::call_once(g_once, [] {
    const std::string& path = env::get().stats;
    if (path.empty()) return;
    auto* t = new Table();
    t->path = path;
    t->pid = getpid();
    g_table.store(t, std::memory_order_release);
    std::atexit(at_exit_write);
  });
}

bool enabled() { return g_table.load(std::memory_order_relaxed) != nullptr; }

void record(uint16_t op, bool waited, uint64_t wait_us) {
  Table* t = g_table.load(std::memory_order_acquire);
  if (!t) return;
  OpCounters& c = t->ops[slot_of(op)];
  c.count.fetch_add(1, std::memory_order_relaxed);
  if (!waited) return;
  c.waited.fetch_add(1, std::memory_order_relaxed);
  c.total_us.fetch_add(wait_us, std::memory_order_relaxed);
  uint64_t prev = c.max_us.load(std::memory_order_relaxed);
  while (wait_us > prev && !c.max_us.compare_exchange_weak(prev, wait_us, std::memory_order_relaxed)) {
  }
}

void add_time(Time what, uint64_t us) {
  Table* t = g_table.load(std::memory_order_acquire);
  if (t) t->time_us[static_cast<size_t>(what)].fetch_add(us, std::memory_order_relaxed);
}

Timer::Timer(Time what) : what_(what), start_ns_(enabled() ? now_ns() : 0) {}

Timer::~Timer() {
  if (start_ns_) add_time(what_, static_cast<uint64_t>(now_ns() - start_ns_) / 1000);
}

void note_connect_started() {
  Table* t = g_table.load(std::memory_order_acquire);
  if (t) t->process_start_to_connect_us.store(process_age_us(), std::memory_order_relaxed);
}

bool write_now() {
  Table* t = g_table.load(std::memory_order_acquire);
  if (!t || t->pid != getpid()) return false;
  struct Row {
    std::string name;
    uint64_t count, waited, total_us, max_us;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < kSlots; ++i) {
    const OpCounters& c = t->ops[i];
    uint64_t n = c.count.load(std::memory_order_relaxed);
    if (!n) continue;
    rows.push_back({op_name(i), n, c.waited.load(std::memory_order_relaxed), c.total_us.load(std::memory_order_relaxed),
                    c.max_us.load(std::memory_order_relaxed)});
  }
  // ops: by total wait. oneway_ops: the ops that never waited (they would all tie at 0 and fall
  // out of the first list), by count.
  std::vector<Row> all = rows;
  std::sort(all.begin(), all.end(), [](const Row& a, const Row& b) { return a.name < b.name; });
  std::vector<Row> oneway;
  for (const Row& r : rows)
    if (!r.waited) oneway.push_back(r);
  auto by = [](std::vector<Row>& v, bool wait_first) {
    std::sort(v.begin(), v.end(), [wait_first](const Row& a, const Row& b) {
      if (wait_first && a.total_us != b.total_us) return a.total_us > b.total_us;
      if (a.count != b.count) return a.count > b.count;
      return a.name < b.name;
    });
    if (v.size() > kTop) v.resize(kTop);
  };
  by(rows, true);
  by(oneway, false);
  Connection* conn = connection();
  FILE* f = fopen(t->path.c_str(), "w");
  if (!f) {
    // Plain stderr: the logger's statics may be gone by now.
    fprintf(stderr, "rgpu: cannot write RGPU_STATS file '%s': %s\n", t->path.c_str(), strerror(errno));
    return false;
  }
  fprintf(f, "{\n  \"pid\": %d,\n  \"round_trips\": %llu,\n  \"oneway_calls\": %llu,\n", static_cast<int>(t->pid),
          static_cast<unsigned long long>(conn ? conn->round_trips() : 0),
          static_cast<unsigned long long>(conn ? conn->oneway_calls() : 0));
  // Bytes over every server's connection (RGPU_SERVER=a,b): what passed through this process.
  uint64_t sent = 0, received = 0;
  for (Connection* c : connections()) {
    sent += c->bytes_sent();
    received += c->bytes_received();
  }
  fprintf(f, "  \"bytes_sent\": %llu,\n  \"bytes_received\": %llu,\n", static_cast<unsigned long long>(sent),
          static_cast<unsigned long long>(received));
  auto list = [f](const char* key, const std::vector<Row>& v, bool last) {
    fprintf(f, "  \"%s\": [", key);
    for (size_t i = 0; i < v.size(); ++i) {
      const Row& r = v[i];
      // Op names are C identifiers or "control:N": nothing to escape.
      fprintf(f, "%s\n    {\"op\": \"%s\", \"count\": %llu, \"waited\": %llu, \"total_wait_us\": %llu, \"max_wait_us\": %llu}",
              i ? "," : "", r.name.c_str(), static_cast<unsigned long long>(r.count),
              static_cast<unsigned long long>(r.waited), static_cast<unsigned long long>(r.total_us),
              static_cast<unsigned long long>(r.max_us));
    }
    fprintf(f, "%s]%s\n", v.empty() ? "" : "\n  ", last ? "" : ",");
  };
  // calls: every op this process sent and how often, by name (the lists below keep the top ones).
  fprintf(f, "  \"calls\": {");
  for (size_t i = 0; i < all.size(); ++i)
    fprintf(f, "%s\n    \"%s\": %llu", i ? "," : "", all[i].name.c_str(), static_cast<unsigned long long>(all[i].count));
  fprintf(f, "%s},\n", all.empty() ? "" : "\n  ");
  list("ops", rows, false);
  list("oneway_ops", oneway, false);
  fprintf(f, "  \"time_us\": {");
  for (size_t i = 0; i < std::size(kTimeNames); ++i)
    fprintf(f, "%s\"%s\": %llu", i ? ", " : "", kTimeNames[i],
            static_cast<unsigned long long>(t->time_us[i].load(std::memory_order_relaxed)));
  fprintf(f, ", \"socket_write\": %llu, \"process_start_to_connect\": %llu}\n}\n",
          static_cast<unsigned long long>(conn ? conn->write_us() : 0),
          static_cast<unsigned long long>(t->process_start_to_connect_us.load(std::memory_order_relaxed)));
  bool ok = !ferror(f);
  ok &= fclose(f) == 0;
  return ok;
}

}  // namespace rgpu::client::stats

// For benchmarks (bench/train_bench.py): writes the RGPU_STATS file now, so a program can read its
// counters mid-run (round trips per training step = the difference of two snapshots). Returns 0
// when written, -1 when RGPU_STATS is not set or the file cannot be written.
extern "C" __attribute__((visibility("default"))) int rgpu_stats_write(void) {
  return rgpu::client::stats::write_now() ? 0 : -1;
}
