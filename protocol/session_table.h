// The listening server's table of its connection processes, in memory shared with them: made by
// the listener before its first fork (MAP_SHARED), so every spare and session process inherits it.
// Each connection's process has a row: what it is doing (handshake or session), its source address,
// its tenant, and what it holds (GPU and host memory). Beside the rows, the recent failed token
// proofs per source address. It is how the limits that span processes are kept (issue 17):
// --max-sessions, the cap on pending handshakes, per-tenant and total memory, and the rate limit on
// wrong tokens. Why shared memory and not the listener: each check is a few loads under a lock
// instead of a round trip to a process that must never block, and a check made by the process
// that asks cannot be raced by the listener's own schedule.
//
// Robustness: one process-shared *robust* mutex guards the table, so a process killed while holding
// it (an evicted handshake, a crash) leaves it usable. A row is freed by the listener when it reaps
// the row's process, so whatever a crashed session held is given back to its tenant and the total.
//
// Scope: one listener's processes. Sessions an earlier listener left (SIGHUP, a crash) are not in a
// new listener's table: they count for neither --max-sessions nor the memory totals.
//
// Beside the limits, the table holds what `rgpu-server --metrics-listen` serves (server/metrics.h)
// and `rgpu-smi` shows: each row's counters of calls (by op), round trips and bytes, which its own
// process adds to with relaxed atomics and nothing else writes (no lock, no shared cache line: a
// few nanoseconds a call), folded into the retired sums when the listener frees the row, so the
// totals only grow; and the server-wide counts of failed handshakes and module-cache lookups.
//
// Without create() (unit tests, fuzzers, a session under test) the table is private to the process:
// the per-session limits still hold.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rgpu::proto::table {

// Makes the shared table. Call once in the listener, before forking. False (logged) when the
// memory cannot be mapped: the limits then hold per process only.
bool create();

// --- Connections ------------------------------------------------------------------------------

// In a spare that took a connection from `host` (an address, no port): a row for this process, in
// the handshake. False when the table is full (the caller refuses the client).
bool claim(const std::string& host);

enum class Admit { kOk, kEvicted, kFull };
// The handshake succeeded: this process becomes a session of `tenant`, unless the listener evicted
// its handshake meanwhile (kEvicted) or `max_sessions` sessions (0: no limit) are live already
// (kFull, *live says how many).
Admit admit(const std::string& tenant, unsigned max_sessions, unsigned* live);

// The listener: frees the row of a process it reaped.
void release(pid_t pid);

// The listener: while more than `max_pending` processes are in the handshake, picks one to end:
// the oldest of the source address with the most pending handshakes (so a flood from one address
// evicts its own connections first). Its row is marked evicted, so it can no longer become a
// session; the caller kills it. 0 when none needs to go.
pid_t evict_pending(unsigned max_pending);

// How many rows are in the handshake and in session.
unsigned pending_handshakes();
unsigned live_sessions();

// This process's tenant as admit() recorded it ("" before).
std::string my_tenant();

// --- Memory -----------------------------------------------------------------------------------

enum Resource { kGpu = 0, kHost = 1 };
// Bytes; 0 means no limit. `per_session` holds for this process, `per_tenant` for the sum over the
// processes of its tenant, `total` for the sum over all processes.
struct Limits {
  uint64_t per_session = 0;
  uint64_t per_tenant = 0;
  uint64_t total = 0;
  // How the options are called, for *why: "--memory-limit-mb" and friends.
  const char* session_option = "";
  const char* tenant_option = "";
  const char* total_option = "";
};
// Counts `bytes` more of r against this process, unless that passes a limit: then false, nothing
// counted, and *why is a sentence naming the limit, its value and what is in use.
bool reserve(Resource r, uint64_t bytes, const Limits& limits, std::string* why);
// Gives back what reserve counted (at most what this process holds).
void unreserve(Resource r, uint64_t bytes);
// What this process holds of r.
uint64_t held(Resource r);
// How much more of r this process could reserve under `limits` now (UINT64_MAX without limits).
uint64_t headroom(Resource r, const Limits& limits);

// --- Failed token proofs ----------------------------------------------------------------------

// How many token proofs failed from `host` in its current minute, and how many seconds are left of
// that minute.
struct Failures {
  uint32_t count = 0;
  int seconds_left = 0;
};
Failures failures(const std::string& host);
// Counts one more failure from `host`; returns the count in its current minute (1 for the first).
uint32_t note_failure(const std::string& host);
// The listener, about once a second: the addresses whose minute has ended with more than
// `logged` failures, and their counts (the individual failures past `logged` were not logged).
// Ended minutes are cleared.
std::vector<std::pair<std::string, uint32_t>> take_ended_minutes(uint32_t logged);

// --- Counters ---------------------------------------------------------------------------------

// Op ids (protocol/messages.h, gen/ops.gen.h, gen/nvml_ops.gen.h) map to counter slots: ids below
// kNvmlSlot to themselves, NVML ids (from kFirstNvmlOp) to the slots after them, any other id to the
// last slot.
inline constexpr size_t kNvmlSlot = 1536;
inline constexpr size_t kOpSlots = 2048;
size_t op_slot(uint16_t op);
// The op id of slot s; kOtherOps for the last slot (ids past the others).
inline constexpr uint32_t kOtherOps = 0x10000;
uint32_t slot_op(size_t s);

// One session process's counters (its row's). Only that process writes them (Counters below).
struct CallCounts {
  uint64_t calls = 0;        // frames the client sent that ran a call
  uint64_t round_trips = 0;  // of them, those the client waited for (not kNoReply)
  uint64_t bytes_received = 0, bytes_sent = 0;  // frame bytes (headers and payloads) from and to the client
};

// This process's counters, for the session's hot path: relaxed atomic adds to memory no other
// process writes.
class Counters {
 public:
  void call(uint16_t op, bool round_trip, uint64_t frame_bytes) {
    add(c_->calls, 1);
    add(c_->bytes_received, frame_bytes);
    add(op_calls_[op_slot(op)], 1);
    if (round_trip) {
      add(c_->round_trips, 1);
      add(op_round_trips_[op_slot(op)], 1);
    }
  }
  void sent(uint64_t frame_bytes) { add(c_->bytes_sent, frame_bytes); }

  Counters(CallCounts* c, uint64_t* op_calls, uint64_t* op_round_trips)
      : c_(c), op_calls_(op_calls), op_round_trips_(op_round_trips) {}

 private:
  static void add(uint64_t& v, uint64_t n) { std::atomic_ref<uint64_t>(v).fetch_add(n, std::memory_order_relaxed); }
  CallCounts* c_;
  uint64_t* op_calls_;
  uint64_t* op_round_trips_;
};
// This process's counters (its row is made if it has none). Call once, in the session process,
// and keep the pointer: it stays valid for the process's life.
Counters* my_counters();

// This session process's client as rgpu-smi and the metrics name it (the handshake's identity),
// and whether its connection is up (false: broken, the session waits out its grace for the client).
void set_identity(const std::string& identity);
void set_connected(bool connected);

// Why a handshake failed (rgpu_handshake_failures_total{reason}).
enum FailureReason {
  kWrongToken = 0,   // the token proof did not match
  kClientClosed,     // the client closed after its Hello (one with another token gives up so)
  kRateLimited,      // refused without a try: too many wrong tokens from the address this minute
  kTimeout,          // not finished within --handshake-timeout
  kTls,              // TLS expected and not spoken, or the other way round, or TLS's own handshake failed
  kMaxSessions,      // --max-sessions reached
  kEvicted,          // dropped for --max-pending-handshakes
  kTableFull,        // no row left for the connection
  kProtocol,         // anything else the handshake refused (a malformed Hello, a version it cannot serve)
  kFailureReasons,
};
const char* failure_name(FailureReason r);  // "wrong_token", ...
void note_handshake_failure(FailureReason r);

// Module-cache lookups by hash (kOpModuleByHash): found, or not (the client then sends the image).
void note_module_cache(bool hit);

// What a spare process found when it started the driver (server/prewarm.h): cuInit's result, the
// driver's version, the GPUs and the first one's name and memory; /healthz answers from it.
struct DriverState {
  bool known = false;  // false until a spare has reported (or with --prewarm none)
  int32_t init_result = 0;
  int32_t version = 0;  // cuDriverGetVersion: 13000 for 13.0
  int32_t devices = 0;
  char gpu0[64] = {};
  uint64_t gpu0_memory = 0;
};
void set_driver_state(const DriverState& s);

// One session in a snapshot.
struct SessionInfo {
  pid_t pid = 0;
  bool connected = true;
  std::string host, tenant, identity;
  double uptime_s = 0;
  uint64_t gpu_bytes = 0, host_bytes = 0;
  CallCounts counts;
  double calls_per_s = 0;  // over the last second the listener sampled (0 before its first)
};
// Everything the metrics endpoint serves, read under the table's lock (so the sums never go back).
struct Snapshot {
  std::vector<SessionInfo> sessions;  // rows in session
  unsigned pending_handshakes = 0;
  CallCounts totals;                  // retired rows and live ones
  std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> ops;  // op id -> (calls, round trips), non-zero only
  uint64_t handshake_failures[kFailureReasons] = {};
  uint64_t module_cache_hits = 0, module_cache_misses = 0;
  DriverState driver;
};
Snapshot snapshot();
// One session's row, by pid; false when no live session of this table has that pid.
bool session_info(pid_t pid, SessionInfo* out);
// The listener, about once a second: each session's calls per second since the last sample.
void sample_rates();

// The address part of "host:port" or "[v6]:port".
std::string host_of(const std::string& peer);

// Tests: forget everything (the table stays where it is).
void reset_for_test();
// Tests: the failures' window, in seconds, instead of a minute.
void set_minute_for_test(int seconds);
// Tests: takes the table's lock and never returns (a process killed while holding it).
[[noreturn]] void hang_holding_the_lock_for_test();

}  // namespace rgpu::proto::table
