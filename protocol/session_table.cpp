// Implementation of protocol/session_table.h.
#include "protocol/session_table.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <new>

#include "common/log.h"
#include "protocol/messages.h"

namespace rgpu::proto::table {
namespace {

enum class State : uint8_t { kFree = 0, kHandshake, kSession, kEvicted };

constexpr size_t kRows = 1024;
constexpr size_t kHosts = 256;
constexpr size_t kName = 64;  // host and tenant names, NUL included
int64_t g_minute_s = 60;  // the window failures are counted in (tests shorten it)

struct Row {
  pid_t pid;
  State state;
  uint8_t disconnected;  // in session with its connection broken: waiting out its grace (set_connected)
  int64_t since_ns;  // when it took its connection (CLOCK_MONOTONIC: the same clock in every process)
  char host[kName];
  char tenant[kName];
  char identity[2 * kName];
  uint64_t held[2];
  // sample_rates(): the calls counted and the time at the last sample, and the rate it found.
  int64_t rate_at_ns;
  uint64_t rate_calls;
  double calls_per_s;
};

// A row's counters, apart from the row: written without the lock by the row's process only.
struct RowCounters {
  CallCounts c;
  uint64_t op_calls[kOpSlots];
  uint64_t op_round_trips[kOpSlots];
};

struct HostFailures {
  char host[kName];  // "" = free
  int64_t minute_start_s;
  uint32_t count;
};

struct Table {
  pthread_mutex_t mu;
  // Rows [0, used) have been taken at some time; the rest were never (rows are taken first free
  // first, so `used` stays near the most sessions ever at once). Scans stop there: the whole table
  // is 160 KiB, and scanning it in every cuMemGetInfo cost the H100's small call 16 µs (issue 16).
  uint32_t used;
  Row rows[kRows];
  HostFailures hosts[kHosts];
  DriverState driver;
  uint64_t handshake_failures[kFailureReasons];  // atomic adds, no lock
  uint64_t module_cache[2];                      // misses, hits; atomic adds, no lock
  RowCounters retired;                           // the sums of freed rows, under the lock
  RowCounters counters[kRows];                   // last: the pages of rows never used stay untouched
};

Table* g_table = nullptr;
int g_row = -1;  // this process's row, valid while g_row_pid == getpid()
pid_t g_row_pid = 0;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
int64_t now_s() { return now_ns() / 1000000000; }

// Fresh anonymous memory is zero, so the table needs no clearing (and the counters' pages of rows
// never used are never touched).
Table* map_table(bool shared) {
  void* p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS,
                 -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Table*>(p);
}

void init(Table* t, bool shared) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (shared) pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&t->mu, &a);
  pthread_mutexattr_destroy(&a);
}

Table& table() {
  if (!g_table) {
    g_table = map_table(false);
    if (!g_table) {
      std::fprintf(stderr, "rgpu: cannot map the session table (%s)\n", std::strerror(errno));
      std::abort();
    }
    init(g_table, false);
  }
  return *g_table;
}

// The table's lock; a holder that died leaves the table as it was (each change under the lock is a
// few stores that leave rows whole or free), so it is marked consistent and used on.
class Lock {
 public:
  Lock() : t_(table()) {
    if (pthread_mutex_lock(&t_.mu) == EOWNERDEAD) pthread_mutex_consistent(&t_.mu);
  }
  ~Lock() { pthread_mutex_unlock(&t_.mu); }
  Table* operator->() { return &t_; }

 private:
  Table& t_;
};

// The rows that have been taken at some time (Table::used).
std::span<Row> rows_used(Lock& t) { return {t->rows, t->used}; }

// Adds one session's counts into a sum.
void add(CallCounts& into, const CallCounts& from) {
  into.calls += from.calls;
  into.round_trips += from.round_trips;
  into.bytes_received += from.bytes_received;
  into.bytes_sent += from.bytes_sent;
}

// Marks row i taken.
void took(Lock& t, size_t i) { t->used = std::max<uint32_t>(t->used, static_cast<uint32_t>(i + 1)); }

void copy_name(char (&dst)[kName], const std::string& src) {
  size_t n = std::min(src.size(), kName - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = 0;
}

// This process's row, made (in session) when it has none: a process outside the accept loop
// (tests) still has its own counts.
Row& my_row(Lock& t) {
  const pid_t me = getpid();
  if (g_row_pid == me && g_row >= 0 && t->rows[g_row].pid == me) return t->rows[g_row];
  for (size_t i = 0; i < t->used; ++i) {
    if (t->rows[i].pid == me) {
      g_row = static_cast<int>(i);
      g_row_pid = me;
      return t->rows[i];
    }
  }
  for (size_t i = 0; i < kRows; ++i) {
    if (t->rows[i].state == State::kFree) {
      Row& r = t->rows[i];
      std::memset(static_cast<void*>(&r), 0, sizeof r);
      r.pid = me;
      r.state = State::kSession;
      r.since_ns = now_ns();
      took(t, i);
      g_row = static_cast<int>(i);
      g_row_pid = me;
      return r;
    }
  }
  // Full (1024 live processes): count against a scratch row; the sums still see everyone else.
  static Row scratch{};
  return scratch;
}

unsigned count(Lock& t, State s) {
  unsigned n = 0;
  for (const Row& r : rows_used(t)) n += r.state == s ? 1 : 0;
  return n;
}

HostFailures* find_host(Lock& t, const std::string& host, bool make) {
  HostFailures* free_slot = nullptr;
  HostFailures* oldest = nullptr;
  for (HostFailures& h : t->hosts) {
    if (h.host[0] == 0) {
      if (!free_slot) free_slot = &h;
      continue;
    }
    if (host == h.host) return &h;
    if (!oldest || h.minute_start_s < oldest->minute_start_s) oldest = &h;
  }
  if (!make) return nullptr;
  HostFailures* h = free_slot ? free_slot : oldest;  // full: the oldest minute is forgotten
  copy_name(h->host, host);
  h->minute_start_s = now_s();
  h->count = 0;
  return h;
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

bool create() {
  Table* p = map_table(true);
  if (!p) {
    log::warn("cannot map the session table (%s): the session, memory and token-failure limits hold per process only",
              std::strerror(errno));
    return false;
  }
  g_table = p;
  init(g_table, true);
  return true;
}

bool claim(const std::string& host) {
  Lock t;
  const pid_t me = getpid();
  for (size_t i = 0; i < kRows; ++i) {
    Row& r = t->rows[i];
    if (r.state != State::kFree) continue;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.pid = me;
    r.state = State::kHandshake;
    r.since_ns = now_ns();
    copy_name(r.host, host);
    took(t, i);
    g_row = static_cast<int>(i);
    g_row_pid = me;
    return true;
  }
  return false;
}

Admit admit(const std::string& tenant, unsigned max_sessions, unsigned* live) {
  Lock t;
  Row& r = my_row(t);
  if (r.state == State::kEvicted) return Admit::kEvicted;
  const unsigned n = count(t, State::kSession) - (r.state == State::kSession ? 1 : 0);
  *live = n;
  if (max_sessions && n >= max_sessions) return Admit::kFull;
  r.state = State::kSession;
  copy_name(r.tenant, tenant);
  return Admit::kOk;
}

void release(pid_t pid) {
  Lock t;
  for (size_t i = 0; i < t->used; ++i) {
    Row& r = t->rows[i];
    if (r.pid != pid || r.state == State::kFree) continue;
    // Its process is gone (reaped): nothing writes its counters any more.
    RowCounters& c = t->counters[i];
    RowCounters& sum = t->retired;
    add(sum.c, c.c);
    if (c.c.calls) {
      for (size_t s = 0; s < kOpSlots; ++s) {
        sum.op_calls[s] += c.op_calls[s];
        sum.op_round_trips[s] += c.op_round_trips[s];
      }
      std::memset(static_cast<void*>(c.op_calls), 0, sizeof c.op_calls);
      std::memset(static_cast<void*>(c.op_round_trips), 0, sizeof c.op_round_trips);
    }
    c.c = {};
    std::memset(static_cast<void*>(&r), 0, sizeof r);
  }
}

pid_t evict_pending(unsigned max_pending) {
  Lock t;
  if (count(t, State::kHandshake) <= max_pending) return 0;
  std::map<std::string, unsigned> per_host;
  for (const Row& r : rows_used(t))
    if (r.state == State::kHandshake) ++per_host[r.host];
  unsigned most = 0;
  for (const auto& [host, n] : per_host) most = std::max(most, n);
  Row* victim = nullptr;
  for (Row& r : rows_used(t)) {
    if (r.state != State::kHandshake || per_host[r.host] != most) continue;
    if (!victim || r.since_ns < victim->since_ns) victim = &r;
  }
  if (!victim) return 0;
  victim->state = State::kEvicted;
  return victim->pid;
}

unsigned pending_handshakes() {
  Lock t;
  return count(t, State::kHandshake);
}

unsigned live_sessions() {
  Lock t;
  return count(t, State::kSession);
}

std::string my_tenant() {
  Lock t;
  return my_row(t).tenant;
}

bool reserve(Resource res, uint64_t bytes, const Limits& l, std::string* why) {
  Lock t;
  Row& me = my_row(t);
  if (!l.per_session && !l.per_tenant && !l.total) {  // no limit: only counted (rgpu-smi, metrics)
    me.held[res] += bytes;
    return true;
  }
  uint64_t tenant_sum = 0, total = 0;
  for (const Row& r : rows_used(t)) {
    if (r.state == State::kFree) continue;
    total += r.held[res];
    if (std::strcmp(r.tenant, me.tenant) == 0) tenant_sum += r.held[res];
  }
  const char* what = res == kGpu ? "GPU memory" : "server host memory";
  auto over = [&](uint64_t limit, uint64_t used) { return limit && (bytes > limit || used > limit - bytes); };
  if (over(l.per_session, me.held[res])) {
    *why = log::format("%s: %s asked with %s in use would pass this session's limit of %s (%s)", what,
                       mib(bytes).c_str(), mib(me.held[res]).c_str(), mib(l.per_session).c_str(), l.session_option);
    return false;
  }
  if (over(l.per_tenant, tenant_sum)) {
    *why = log::format("%s: %s asked with %s in use by tenant '%s' would pass its limit of %s (%s)", what,
                       mib(bytes).c_str(), mib(tenant_sum).c_str(), me.tenant, mib(l.per_tenant).c_str(),
                       l.tenant_option);
    return false;
  }
  if (over(l.total, total)) {
    *why = log::format("%s: %s asked with %s in use by all sessions would pass the server's limit of %s (%s)", what,
                       mib(bytes).c_str(), mib(total).c_str(), mib(l.total).c_str(), l.total_option);
    return false;
  }
  me.held[res] += bytes;
  return true;
}

void unreserve(Resource res, uint64_t bytes) {
  Lock t;
  Row& me = my_row(t);
  me.held[res] -= std::min(bytes, me.held[res]);
}

uint64_t headroom(Resource res, const Limits& l) {
  if (!l.per_session && !l.per_tenant && !l.total) return UINT64_MAX;  // no lock: cuMemGetInfo's path
  Lock t;
  Row& me = my_row(t);
  uint64_t tenant_sum = 0, total = 0;
  for (const Row& r : rows_used(t)) {
    if (r.state == State::kFree) continue;
    total += r.held[res];
    if (std::strcmp(r.tenant, me.tenant) == 0) tenant_sum += r.held[res];
  }
  uint64_t room = UINT64_MAX;
  auto cap = [&](uint64_t limit, uint64_t used) {
    if (limit) room = std::min(room, used >= limit ? 0 : limit - used);
  };
  cap(l.per_session, me.held[res]);
  cap(l.per_tenant, tenant_sum);
  cap(l.total, total);
  return room;
}

uint64_t held(Resource res) {
  Lock t;
  return my_row(t).held[res];
}

Failures failures(const std::string& host) {
  Lock t;
  Failures f;
  HostFailures* h = find_host(t, host, false);
  if (!h) return f;
  const int64_t age = now_s() - h->minute_start_s;
  if (age >= g_minute_s) return f;
  f.count = h->count;
  f.seconds_left = static_cast<int>(g_minute_s - age);
  return f;
}

uint32_t note_failure(const std::string& host) {
  Lock t;
  HostFailures* h = find_host(t, host, true);
  if (now_s() - h->minute_start_s >= g_minute_s) {  // a new minute (the listener summarised the last)
    h->minute_start_s = now_s();
    h->count = 0;
  }
  return ++h->count;
}

std::vector<std::pair<std::string, uint32_t>> take_ended_minutes(uint32_t logged) {
  Lock t;
  std::vector<std::pair<std::string, uint32_t>> out;
  for (HostFailures& h : t->hosts) {
    if (h.host[0] == 0 || now_s() - h.minute_start_s < g_minute_s) continue;
    if (h.count > logged) out.emplace_back(h.host, h.count);
    std::memset(static_cast<void*>(&h), 0, sizeof h);
  }
  return out;
}

size_t op_slot(uint16_t op) {
  if (op < kNvmlSlot) return op;
  const size_t nvml = static_cast<size_t>(op) - kFirstNvmlOp;
  if (op >= kFirstNvmlOp && nvml < kOpSlots - 1 - kNvmlSlot) return kNvmlSlot + nvml;
  return kOpSlots - 1;
}

uint32_t slot_op(size_t s) {
  if (s < kNvmlSlot) return static_cast<uint32_t>(s);
  if (s < kOpSlots - 1) return static_cast<uint32_t>(kFirstNvmlOp + (s - kNvmlSlot));
  return kOtherOps;
}

Counters* my_counters() {
  Lock t;
  Row& r = my_row(t);
  RowCounters* c;
  if (&r >= t->rows && &r < t->rows + kRows) {
    c = &t->counters[&r - t->rows];
  } else {
    static RowCounters* scratch = new RowCounters{};  // the table is full: counted nowhere
    c = scratch;
  }
  return new Counters(&c->c, c->op_calls, c->op_round_trips);  // kept for the process's life
}

void set_identity(const std::string& identity) {
  Lock t;
  Row& r = my_row(t);
  size_t n = std::min(identity.size(), sizeof r.identity - 1);
  std::memcpy(r.identity, identity.data(), n);
  r.identity[n] = 0;
}

void set_connected(bool connected) {
  Lock t;
  my_row(t).disconnected = connected ? 0 : 1;
}

const char* failure_name(FailureReason r) {
  static const char* const kNames[kFailureReasons] = {"wrong_token", "client_closed", "rate_limited",
                                                      "timeout",     "tls",           "max_sessions",
                                                      "evicted",     "table_full",    "protocol"};
  return r < kFailureReasons ? kNames[r] : "?";
}

void note_handshake_failure(FailureReason r) {
  if (r >= kFailureReasons) return;
  std::atomic_ref<uint64_t>(table().handshake_failures[r]).fetch_add(1, std::memory_order_relaxed);
}

void note_module_cache(bool hit) {
  std::atomic_ref<uint64_t>(table().module_cache[hit ? 1 : 0]).fetch_add(1, std::memory_order_relaxed);
}

void set_driver_state(const DriverState& s) {
  Lock t;
  t->driver = s;
  t->driver.known = true;
}

namespace {
uint64_t load(const uint64_t& v) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(v)).load(std::memory_order_relaxed);
}
CallCounts load(const CallCounts& c) {
  return {load(c.calls), load(c.round_trips), load(c.bytes_received), load(c.bytes_sent)};
}
SessionInfo info(Lock& t, size_t i, int64_t now) {
  const Row& r = t->rows[i];
  SessionInfo s;
  s.pid = r.pid;
  s.connected = !r.disconnected;
  s.host = r.host;
  s.tenant = r.tenant;
  s.identity = r.identity;
  s.uptime_s = static_cast<double>(now - r.since_ns) / 1e9;
  s.gpu_bytes = r.held[kGpu];
  s.host_bytes = r.held[kHost];
  s.counts = load(t->counters[i].c);
  s.calls_per_s = r.calls_per_s;
  return s;
}
}  // namespace

Snapshot snapshot() {
  Lock t;
  Snapshot out;
  const int64_t now = now_ns();
  std::vector<uint64_t> calls(kOpSlots), round_trips(kOpSlots);
  for (size_t s = 0; s < kOpSlots; ++s) {
    calls[s] = t->retired.op_calls[s];
    round_trips[s] = t->retired.op_round_trips[s];
  }
  out.totals = t->retired.c;
  for (size_t i = 0; i < t->used; ++i) {
    const Row& r = t->rows[i];
    if (r.state == State::kHandshake) ++out.pending_handshakes;
    if (r.state != State::kSession) continue;
    SessionInfo s = info(t, i, now);
    add(out.totals, s.counts);
    if (s.counts.calls) {
      for (size_t k = 0; k < kOpSlots; ++k) {
        calls[k] += load(t->counters[i].op_calls[k]);
        round_trips[k] += load(t->counters[i].op_round_trips[k]);
      }
    }
    out.sessions.push_back(std::move(s));
  }
  for (size_t k = 0; k < kOpSlots; ++k)
    if (calls[k]) out.ops.push_back({slot_op(k), {calls[k], round_trips[k]}});
  for (int k = 0; k < kFailureReasons; ++k) out.handshake_failures[k] = load(t->handshake_failures[k]);
  out.module_cache_misses = load(t->module_cache[0]);
  out.module_cache_hits = load(t->module_cache[1]);
  out.driver = t->driver;
  return out;
}

bool session_info(pid_t pid, SessionInfo* out) {
  Lock t;
  for (size_t i = 0; i < t->used; ++i) {
    if (t->rows[i].pid != pid || t->rows[i].state != State::kSession) continue;
    *out = info(t, i, now_ns());
    return true;
  }
  return false;
}

void sample_rates() {
  Lock t;
  const int64_t now = now_ns();
  for (size_t i = 0; i < t->used; ++i) {
    Row& r = t->rows[i];
    if (r.state != State::kSession) continue;
    const uint64_t calls = load(t->counters[i].c.calls);
    if (r.rate_at_ns == 0) {
      r.rate_at_ns = now;
      r.rate_calls = calls;
      continue;
    }
    const int64_t dt = now - r.rate_at_ns;
    if (dt < 500000000) continue;  // at least half a second between samples
    r.calls_per_s = static_cast<double>(calls - r.rate_calls) * 1e9 / static_cast<double>(dt);
    r.rate_at_ns = now;
    r.rate_calls = calls;
  }
}

std::string host_of(const std::string& peer) {
  if (!peer.empty() && peer[0] == '[') {
    size_t end = peer.find(']');
    return end == std::string::npos ? peer : peer.substr(1, end - 1);
  }
  // net::peer_name's "HOST:PORT", whose HOST may be an IPv6 address with colons of its own.
  size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

void set_minute_for_test(int seconds) { g_minute_s = seconds; }

void hang_holding_the_lock_for_test() {
  Lock t;
  for (;;) pause();
}

void reset_for_test() {
  Lock t;
  std::memset(static_cast<void*>(t->rows), 0, sizeof t->rows);
  std::memset(static_cast<void*>(t->hosts), 0, sizeof t->hosts);
  t->driver = {};
  std::memset(static_cast<void*>(t->handshake_failures), 0, sizeof t->handshake_failures);
  std::memset(static_cast<void*>(t->module_cache), 0, sizeof t->module_cache);
  std::memset(static_cast<void*>(&t->retired), 0, sizeof t->retired);
  std::memset(static_cast<void*>(t->counters), 0, sizeof t->counters);
  g_row = -1;
}

}  // namespace rgpu::proto::table
