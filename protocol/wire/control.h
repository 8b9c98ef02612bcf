// Control ops on the wire that belong to no CUDA call group: allocations ahead of the program's
// asking (kOpAllocAhead, kOpAllocMany), host-callback frames (kOpCallback, kOpCallbackDone) and
// the server's live sessions (kOpSessions, kOpSessionControl). Used by client/device_memory.cpp,
// client/connection.cpp, client/driver/host_callback.cpp and client/nvml/runtime.cpp, and by
// server/handlers/control.cpp and server/session.cpp. protocol/messages.h says what each op does.
//
// Layout:
//  kOpAllocAhead: u64 size, u32 extra. Reply: CUresult; on success u64 address, u32 n (at most
//    kMaxAllocAhead), n × u64 addresses.
//  kOpAllocMany: u32 k, k × (u64 size, u32 count). Reply: CUresult; on success u32 k, k × (u32 n,
//    n × u64 address). The request's reader takes any k whose entries the payload holds (the
//    server answers k > kMaxAllocMany, and sizes and counts over the limits, with
//    CUDA_ERROR_INVALID_VALUE); the reply's reader refuses k over kMaxAllocMany and more than
//    kMaxAllocManyCount addresses in all.
//  kOpCallback (server -> client, not a reply): u64 callback id, i32 stream status (CUresult),
//    u32 run; exactly kCallbackFrame bytes.
//  kOpCallbackDone (client -> server, one-way): u64 callback id; exactly kCallbackDoneFrame bytes.
//  kOpSessions: nothing. Reply: CUresult, u32 n (at most kMaxSessions), n × (u32 pid, str
//    identity, str peer, u64 start time in unix seconds, u8 1 for the asking session), then (from
//    servers with --metrics-listen's counters; absent from older ones) n × (u8 1 when the server
//    counted this session (0: one an earlier listener left), u64 GPU memory bytes, u64 calls,
//    u64 calls per second over the last sample, in thousandths).
//  kOpSessionControl: u8 action, u32 pid, i32 gpu; exactly kSessionControlFrame bytes. The reader
//    takes any action byte (the server answers one it does not know). Reply: CUresult, str
//    message (at most kMaxSessionControlMessage bytes), u8 state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto::wire {

struct AllocAhead {
  uint64_t size = 0;
  uint32_t extra = 0;
};
void put_alloc_ahead(Writer& w, const AllocAhead& v);
bool read_alloc_ahead(Reader& r, AllocAhead* out);
// The reply after the CUresult.
void put_alloc_ahead_reply(Writer& w, uint64_t first, const std::vector<uint64_t>& more);
bool read_alloc_ahead_reply(Reader& r, uint64_t* first, std::vector<uint64_t>* more);

// (size, count) per size asked for.
using AllocSizes = std::vector<std::pair<uint64_t, uint32_t>>;
void put_alloc_many(Writer& w, const AllocSizes& v);
bool read_alloc_many(Reader& r, AllocSizes* out);
// The reply after the CUresult: the addresses made, per size asked for.
void put_alloc_many_reply(Writer& w, const std::vector<std::vector<uint64_t>>& v);
bool read_alloc_many_reply(Reader& r, std::vector<std::vector<uint64_t>>* out);

inline constexpr size_t kCallbackFrame = 16;
inline constexpr size_t kCallbackDoneFrame = 8;
struct Callback {
  uint64_t id = 0;
  int32_t status = 0;
  uint32_t run = 0;
};
void put_callback(Writer& w, const Callback& v);
bool read_callback(Reader& r, Callback* out);
void put_callback_done(Writer& w, uint64_t id);
bool read_callback_done(Reader& r, uint64_t* id);

inline constexpr uint32_t kMaxSessions = 4096;
struct SessionEntry {
  uint32_t pid = 0;
  std::string identity, peer;
  uint64_t start = 0;
  bool self = false;
  // What the server's session table counts for it (protocol/session_table.h); counted is false
  // for a session it does not count, and for every session of a server older than these fields.
  bool counted = false;
  uint64_t gpu_bytes = 0;
  uint64_t calls = 0;
  uint64_t calls_per_s_milli = 0;
};
void put_sessions(Writer& w, const std::vector<SessionEntry>& v);
bool read_sessions(Reader& r, std::vector<SessionEntry>* out);

inline constexpr size_t kSessionControlFrame = 9;
struct SessionControl {
  uint8_t action = 0;  // kSessionSuspend, kSessionResume, kSessionMigrate (protocol/messages.h)
  uint32_t pid = 0;
  int32_t gpu = -1;
};
void put_session_control(Writer& w, const SessionControl& v);
bool read_session_control(Reader& r, SessionControl* out);
// The reply after the CUresult.
struct SessionControlReply {
  std::string message;
  uint8_t state = 0;  // a CUprocessState, or kSessionStateUnknown
};
void put_session_control_reply(Writer& w, const SessionControlReply& v);
bool read_session_control_reply(Reader& r, SessionControlReply* out);

}  // namespace rgpu::proto::wire
