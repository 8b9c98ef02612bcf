// RGPU_STATS: per-process call statistics, written as JSON when the process exits.
//
// With RGPU_STATS=<path>, cuInit registers an exit handler that writes <path> (overwritten):
//
//   {
//     "pid": 1234,
//     "round_trips": 120,          // calls that waited for a reply (Connection::round_trips)
//     "oneway_calls": 3400,        // calls queued without waiting (Connection::oneway_calls)
//     "bytes_sent": 39845888,      // frame bytes (headers + payloads) sent after the handshake
//     "bytes_received": 123456,    // frame bytes received after the handshake
//                                  // (Connection::bytes_sent / bytes_received, every server's summed)
//     "calls": {"cuLaunchKernel": 3000, ...},  // every op sent, by name: how many times
//     "ops": [                     // at most 20, by total_wait_us, largest first
//       {"op": "cuMemcpyHtoD_v2", "count": 46, "waited": 8, "total_wait_us": 16363, "max_wait_us": 14170},
//       {"op": "cuCtxSynchronize", "count": 7, "waited": 7, "total_wait_us": 5120, "max_wait_us": 2210},
//       ...
//     ],
//     "oneway_ops": [              // at most 20 ops none of whose calls waited, by count
//       {"op": "cuLaunchKernel", "count": 3, "waited": 0, "total_wait_us": 0, "max_wait_us": 0},
//       ...
//     ],
//     "time_us": {                 // the client's own time that no wait above shows (Time below)
//       "connect": 21000, "image_digest": 5300, "image_parse": 1200, "socket_write": 800,
//       "process_start_to_connect": 2400000
//     }
//   }
//
// "count" is every call of that op; "waited" how many of them waited for their reply (all of
// them with RGPU_BATCH=0). Wait times are the time a waiting call blocked for its reply (in
// Call::finish, after the request was sent), in microseconds. Control messages (below the first
// driver op, e.g. the device snapshot) are named "control:<id>". Ties in total_wait_us are
// broken by count, then by name. An op that never waited would tie at 0 in "ops" and drop out
// behind the waiting ones, hence "oneway_ops"; an op with both kinds of call is in "ops" only.
// The handshake is not counted. The file itself is plain JSON (no comments).
//
// Counting is relaxed atomics in a heap table that is never freed, so the exit handler may run
// after static destructors (it reads no other static state either); when RGPU_STATS is unset
// nothing is allocated and counting is one load of a null pointer. Calls made by exit handlers
// that run after this one are not in the file. A forked child does not overwrite its parent's
// file.
#pragma once

#include <cstdint>

namespace rgpu::client::stats {

// Reads RGPU_STATS; when set, allocates the table and registers the exit handler (once).
void enable_from_env();
// Whether the table exists (RGPU_STATS set and enable_from_env() ran).
bool enabled();
// Counts one call of op; wait_us is its blocking time when it waited.
void record(uint16_t op, bool waited, uint64_t wait_us);
// Writes the JSON file now (what the exit handler does). False if off or the file cannot be written.
bool write_now();

// Where a slow start goes when the waits do not explain it: the client's own time in each of
// these, summed over threads ("time_us" in the file, with "socket_write": Connection::write_us).
enum class Time : uint8_t {
  kConnect,      // opening the connection: TCP connect, handshake and the device snapshot
  kImageDigest,  // SHA-256 of module images (client/modules.cpp)
  kImageParse,   // reading kernel parameter layouts from module images
  kCount
};
void add_time(Time what, uint64_t us);
// Adds the time from construction to destruction to `what`; nothing when stats are off.
class Timer {
 public:
  explicit Timer(Time what);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  Time what_;
  int64_t start_ns_ = 0;  // 0: not timing
};
// Notes when the connection opens, as time since the process started ("process_start_to_connect").
void note_connect_started();

}  // namespace rgpu::client::stats
