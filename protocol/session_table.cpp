// Implementation of protocol/session_table.h.
#include "protocol/session_table.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <span>
#include <new>

#include "common/log.h"

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
  int64_t since_ns;  // when it took its connection (CLOCK_MONOTONIC: the same clock in every process)
  char host[kName];
  char tenant[kName];
  uint64_t held[2];
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

void init(Table* t, bool shared) {
  std::memset(static_cast<void*>(t), 0, sizeof *t);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (shared) pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&t->mu, &a);
  pthread_mutexattr_destroy(&a);
}

Table& table() {
  if (!g_table) {
    g_table = static_cast<Table*>(::operator new(sizeof(Table)));
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
  void* p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    log::warn("cannot map the session table (%s): the session, memory and token-failure limits hold per process only",
              std::strerror(errno));
    return false;
  }
  g_table = static_cast<Table*>(p);
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
  for (Row& r : rows_used(t)) {
    if (r.pid == pid && r.state != State::kFree) std::memset(static_cast<void*>(&r), 0, sizeof r);
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
  g_row = -1;
}

}  // namespace rgpu::proto::table
