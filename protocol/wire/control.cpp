// Control ops on the wire (layout in control.h).
#include "protocol/wire/control.h"

#include "protocol/messages.h"

namespace rgpu::proto::wire {

void put_alloc_ahead(Writer& w, const AllocAhead& v) {
  w.put_u64(v.size);
  w.put_u32(v.extra);
}

bool read_alloc_ahead(Reader& r, AllocAhead* out) {
  out->size = r.u64();
  out->extra = r.u32();
  return r.ok();
}

void put_alloc_ahead_reply(Writer& w, uint64_t first, const std::vector<uint64_t>& more) {
  w.put_u64(first);
  w.put_u32(static_cast<uint32_t>(more.size()));
  for (uint64_t p : more) w.put_u64(p);
}

bool read_alloc_ahead_reply(Reader& r, uint64_t* first, std::vector<uint64_t>* more) {
  *first = r.u64();
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxAllocAhead) return r.fail();
  more->resize(n);
  for (uint64_t& p : *more) p = r.u64();
  return r.ok();
}

void put_alloc_many(Writer& w, const AllocSizes& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (const auto& [size, count] : v) {
    w.put_u64(size);
    w.put_u32(count);
  }
}

bool read_alloc_many(Reader& r, AllocSizes* out) {
  uint32_t k = r.u32();
  if (!r.ok() || k > r.left() / 12) return r.fail();  // 12 bytes an entry: no count the payload lacks
  out->resize(k);
  for (auto& [size, count] : *out) {
    size = r.u64();
    count = r.u32();
  }
  return r.ok();
}

void put_alloc_many_reply(Writer& w, const std::vector<std::vector<uint64_t>>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (const auto& made : v) {
    w.put_u32(static_cast<uint32_t>(made.size()));
    for (uint64_t p : made) w.put_u64(p);
  }
}

bool read_alloc_many_reply(Reader& r, std::vector<std::vector<uint64_t>>* out) {
  uint32_t k = r.u32();
  // Every count is checked against the bytes behind it before anything is sized by it (4 bytes an
  // entry's count, 8 an address), as wire_control_fuzz showed 3,000 inputs a second otherwise.
  if (!r.ok() || k > kMaxAllocMany || k > r.left() / 4) return r.fail();
  out->assign(k, {});
  uint64_t total = 0;
  for (auto& made : *out) {
    uint32_t n = r.u32();
    total += n;
    if (!r.ok() || total > kMaxAllocManyCount || n > r.left() / 8) return r.fail();
    made.resize(n);
    for (uint64_t& p : made) p = r.u64();
  }
  return r.ok();
}

void put_callback(Writer& w, const Callback& v) {
  w.put_u64(v.id);
  w.put<int32_t>(v.status);
  w.put_u32(v.run);
}

bool read_callback(Reader& r, Callback* out) {
  if (r.left() != kCallbackFrame) return r.fail();
  out->id = r.u64();
  out->status = r.i32();
  out->run = r.u32();
  return r.ok();
}

void put_callback_done(Writer& w, uint64_t id) { w.put_u64(id); }

bool read_callback_done(Reader& r, uint64_t* id) {
  if (r.left() != kCallbackDoneFrame) return r.fail();
  *id = r.u64();
  return r.ok();
}

void put_sessions(Writer& w, const std::vector<SessionEntry>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (const SessionEntry& e : v) {
    w.put_u32(e.pid);
    w.put_str(e.identity);
    w.put_str(e.peer);
    w.put_u64(e.start);
    w.put_u8(e.self ? 1 : 0);
  }
  for (const SessionEntry& e : v) {
    w.put_u8(e.counted ? 1 : 0);
    w.put_u64(e.gpu_bytes);
    w.put_u64(e.calls);
    w.put_u64(e.calls_per_s_milli);
  }
}

bool read_sessions(Reader& r, std::vector<SessionEntry>* out) {
  uint32_t n = r.u32();
  // 21 bytes at the least an entry (pid, two empty strings, start, self).
  if (!r.ok() || n > kMaxSessions || n > r.left() / 21) return r.fail();
  out->assign(n, SessionEntry{});  // fresh entries: an older server's list leaves the counts unset
  for (SessionEntry& e : *out) {
    e.pid = r.u32();
    e.identity = r.str();
    e.peer = r.str();
    e.start = r.u64();
    e.self = r.u8() != 0;
    if (!r.ok()) return false;
  }
  if (r.left() == 0) return true;  // an older server: no counts
  for (SessionEntry& e : *out) {
    e.counted = r.u8() != 0;
    e.gpu_bytes = r.u64();
    e.calls = r.u64();
    e.calls_per_s_milli = r.u64();
  }
  return r.ok();
}

void put_session_control(Writer& w, const SessionControl& v) {
  w.put_u8(v.action);
  w.put_u32(v.pid);
  w.put_i32(v.gpu);
}

bool read_session_control(Reader& r, SessionControl* out) {
  if (r.left() != kSessionControlFrame) return r.fail();
  out->action = r.u8();
  out->pid = r.u32();
  out->gpu = r.i32();
  return r.ok();
}

void put_session_control_reply(Writer& w, const SessionControlReply& v) {
  // Cut, never refused: the message is for a person, and a cut one still says what happened.
  w.put_str(v.message.size() > kMaxSessionControlMessage ? v.message.substr(0, kMaxSessionControlMessage) : v.message);
  w.put_u8(v.state);
}

bool read_session_control_reply(Reader& r, SessionControlReply* out) {
  out->message = r.str(kMaxSessionControlMessage);
  out->state = r.u8();
  return r.ok();
}

}  // namespace rgpu::proto::wire
