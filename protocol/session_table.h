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
// Without create() (unit tests, fuzzers, a session under test) the table is private to the process:
// the per-session limits still hold.
#pragma once

#include <sys/types.h>

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

// The address part of "host:port" or "[v6]:port".
std::string host_of(const std::string& peer);

// Tests: forget everything (the table stays where it is).
void reset_for_test();
// Tests: the failures' window, in seconds, instead of a minute.
void set_minute_for_test(int seconds);
// Tests: takes the table's lock and never returns (a process killed while holding it).
[[noreturn]] void hang_holding_the_lock_for_test();

}  // namespace rgpu::proto::table
