// Implementation of runtime/connection.h.
#include "runtime/connection.h"

#include <c10/util/Exception.h>
#include <torch/headeronly/version.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "protocol/torch_wire.h"
#include "protocol/client_session.h"
#include "protocol/drain.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"
#include "protocol/messages.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;

namespace {

std::mutex g_connect_mu;
std::atomic<Connection*> g_conn{nullptr};
std::mutex g_seed_mu;
bool g_has_seed = false;
uint64_t g_seed = 0;
// Whether this process is a child forked after the connection was made (the connection is the
// parent's). Set by a pthread_atfork handler, so that get() and existing(), called on every op,
// ask no getpid() system call (it was 3% of the client's time generating tokens).
std::atomic<bool> g_forked{false};

bool forked_child(int pid) { return g_forked.load(std::memory_order_relaxed) && pid != getpid(); }

// What is queued is written once it is this much, without waiting for the flusher.
constexpr size_t kFlushBytes = 4u << 20;
// How long is_available() and device_count() try to reach a server not connected yet: a second
// attempt after the first backoff wait, so that a server that is not there is answered at once.
constexpr std::chrono::milliseconds kProbeTime{500};
// Storage changes that wait for a frame go in one of their own past this many.
constexpr size_t kMaxPendingStorage = kMaxStorageChanges;

// net.cpp and handshake.cpp speak of rgpu-server; this connection goes to rgpu-opserver.
std::string about_opserver(std::string s) {
  for (size_t at; (at = s.find("rgpu-server")) != std::string::npos;) s.replace(at, 11, "rgpu-opserver");
  for (size_t at; (at = s.find("RGPU_SERVER")) != std::string::npos;) s.replace(at, 11, "RGPU_OPSERVER");
  return s;
}

}  // namespace

void raise_error(uint8_t kind, const std::string& message) {
  // The c10 class torch turns into the Python type the server's torch raised (torch_wire.h, ErrorKind).
  switch (kind) {
    case kErrNotImplemented: C10_THROW_ERROR(NotImplementedError, message);
    case kErrValue: C10_THROW_ERROR(ValueError, message);
    case kErrIndex: C10_THROW_ERROR(IndexError, message);
    case kErrType: C10_THROW_ERROR(TypeError, message);
    case kErrOutOfMemory: C10_THROW_ERROR(OutOfMemoryError, message);
    case kErrLinAlg: C10_THROW_ERROR(LinAlgError, message);
    case kErrAccelerator: throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, 0, message);
    default: C10_THROW_ERROR(Error, message);
  }
}

Connection& Connection::get(bool patient) {
  if (Connection* c = g_conn.load(std::memory_order_acquire)) {
    TORCH_CHECK(!forked_child(c->pid_),
                "rgpu: this process was forked from one connected to rgpu-opserver, and the connection belongs to the "
                "parent; use rgpu only in the parent, or start children with multiprocessing's 'spawn' method "
                "(DataLoader(multiprocessing_context='spawn'))");
    return *c;
  }
  std::lock_guard<std::mutex> lk(g_connect_mu);
  if (Connection* c = g_conn.load()) return *c;
  auto* c = new Connection();  // never deleted: see connection.h
  try {
    c->connect(patient);
  } catch (...) {
    delete c;
    throw;
  }
  static const int atfork = pthread_atfork(nullptr, nullptr, [] { g_forked.store(true, std::memory_order_relaxed); });
  (void)atfork;
  g_conn.store(c, std::memory_order_release);
  std::thread([c] { c->flusher(); }).detach();
  std::atexit([] {
    if (Connection* c = existing()) c->goodbye();
  });
  std::lock_guard<std::mutex> sk(g_seed_mu);
  if (g_has_seed) {
    Writer w;
    w.put_u64(g_seed);
    c->post(kTorchSeed, w);
  }
  return *c;
}

Connection* Connection::existing() {
  Connection* c = g_conn.load(std::memory_order_acquire);
  return c && !forked_child(c->pid_) ? c : nullptr;  // a forked child must not write to the parent's socket
}

void Connection::seed(uint64_t seed) {
  std::lock_guard<std::mutex> sk(g_seed_mu);
  g_has_seed = true;
  g_seed = seed;
  if (Connection* c = existing()) {
    Writer w;
    w.put_u64(seed);
    c->post(kTorchSeed, w);
  }
}

void Connection::connect(bool patient) {
  const env::Settings& s = env::get();
  proto::ClientSessionOptions o;
  std::string err;
  bool tls = false;
  if (!proto::parse_server_address(s.opserver, 9720, &o.address, &tls, &err)) TORCH_CHECK(false, "RGPU_OPSERVER: ", err);
  if (tls) {
    o.tls = proto::tls_client_context(proto::TlsClientConfig::from_env(), &err);
    TORCH_CHECK(o.tls, "RGPU_OPSERVER: ", err);
  }
  address_ = o.address.str();
  o.token = s.token;
  o.identity = proto::client_identity("torch");
  o.server_program = "rgpu-opserver";
  o.connect_timeout = patient ? std::chrono::milliseconds(std::chrono::seconds(s.connect_timeout_s)) : kProbeTime;
  o.quiet = !patient;
  o.fix = "is it running? start it with rgpu-opserver --device cpu|cuda (and point RGPU_OPSERVER at it; "
          "RGPU_CONNECT_TIMEOUT sets how long to keep trying)";
  o.after_handshake = [](int fd, proto::Transport&, const proto::ClientHandshakeResult&, std::string*) {
    net::set_buffers(fd, 4 << 20);
    return proto::Attempt::kDone;
  };
  proto::ClientSession session;
  if (!proto::open_client_session(o, &session, &err)) TORCH_CHECK(false, about_opserver(err));
  ch_ = std::move(session.channel);
  pid_ = getpid();

  Writer hello;
  std::string mine = log::format("%d.%d.%d", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  hello.put_str(mine);
  iovec part{hello.buf().data(), hello.size()};
  proto::FrameHeader h{};
  Bytes payload;
  if (ch_->send(kTorchHello, 0, 0, 0, &part, 1, true) != proto::Status::kOk ||
      ch_->receive_frame(&h, &payload, proto::Wait::kAwaiting) != proto::Status::kOk)
    TORCH_CHECK(false, "rgpu-opserver at ", address_, " did not answer the torch hello (", ch_->why(), ")");
  TORCH_CHECK(h.op == kTorchHello && (h.flags & proto::kReply), "rgpu-opserver at ", address_,
              " did not answer the torch hello (it sent message ", h.op,
              "); is RGPU_OPSERVER pointing at rgpu-opserver (not rgpu-server)?");
  Reader r(payload.data(), payload.size());
  ReplyStatus st;
  get_status(r, &st);
  server_torch_ = r.str(64);
  server_device_ = r.str(64);
  TORCH_CHECK(!st.failed, "rgpu-opserver at ", address_, " refused this client: ", st.message);
  device_count_ = r.get<int32_t>();
  TORCH_CHECK(r.ok(), "rgpu-opserver at ", address_, " sent a malformed hello reply");
  TORCH_CHECK(device_count_ >= 1 && device_count_ <= kMaxDevices, "rgpu-opserver at ", address_,
              " presents ", device_count_, " devices; rgpu supports 1 to ", kMaxDevices);
  next_id_ = kFirstStorageId;
}

void Connection::goodbye() {
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_ || !ch_) return;
  proto::send_goodbye(*ch_, 0);
}

proto::ChannelStats Connection::channel_stats() const { return ch_->stats(); }

uint64_t Connection::mint(uint64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t id = next_id_;
  next_id_ += n;
  return id;
}

uint64_t Connection::allocate(uint64_t nbytes, uint8_t device) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t id = next_id_++;
  pending_allocs_.push_back({id, nbytes, device});
  if (pending_allocs_.size() + pending_frees_.size() >= kMaxPendingStorage) post_storage_locked();
  schedule_flush_locked();
  return id;
}

void Connection::release(uint64_t id) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_) return;  // the storage went with the connection
    pending_frees_.push_back(id);
    if (pending_allocs_.size() + pending_frees_.size() >= kMaxPendingStorage) post_storage_locked();
    schedule_flush_locked();
  } catch (...) {
    // Out of memory queueing a free: the server keeps the storage until the session ends.
  }
}

void Connection::append_frame(uint16_t op, uint16_t flags, uint32_t request_id, const std::vector<uint8_t>& payload,
                              const void* data, size_t n, bool flush) {
  const size_t changes = pending_allocs_.size() + pending_frees_.size();
  const size_t prefix = changes ? 8 + 17 * pending_allocs_.size() + 8 * pending_frees_.size() : 0;
  TORCH_CHECK(payload.size() + n + prefix <= proto::kMaxPayload, "rgpu: a single op's arguments exceed ",
              proto::kMaxPayload >> 20, " MiB; pass large host tensors through .to(\"rgpu\") first");
  Writer w;
  if (changes) {
    flags |= kWithStorage;
    w.put_u32(static_cast<uint32_t>(pending_allocs_.size()));
    for (const PendingAlloc& a : pending_allocs_) {
      w.put_u64(a.id);
      w.put_u64(a.nbytes);
      w.put_u8(a.device);
    }
    w.put_u32(static_cast<uint32_t>(pending_frees_.size()));
    for (uint64_t id : pending_frees_) w.put_u64(id);
    pending_allocs_.clear();
    pending_frees_.clear();
  }
  iovec parts[3] = {{w.buf().data(), w.size()},
                    {const_cast<uint8_t*>(payload.data()), payload.size()},
                    {const_cast<void*>(data), n}};
  ++frames_;
  bytes_sent_ += sizeof(proto::FrameHeader) + prefix + payload.size() + n;
  // A broken connection is not an error here: the channel resends after the resume. kLost is.
  if (ch_->send(op, flags, request_id, 0, parts, 3, flush || ch_->unflushed() >= kFlushBytes) != proto::Status::kOk)
    lost(ch_->why());
}

void Connection::post_storage_locked() {
  append_frame(kTorchStorage, proto::kNoReply, 0, {});
  ++posts_;
}

void Connection::schedule_flush_locked() {
  if (!flush_pending_) {
    flush_pending_ = true;
    cv_.notify_one();
  }
}

void Connection::lost(const std::string& what) {
  broken_ = true;
  broken_why_ = what;
  TORCH_CHECK(false, "rgpu: lost the session on rgpu-opserver at ", address_, " (", what,
              "); the tensors on it are gone: restart the program (and the server, if it stopped)");
}

void Connection::flush_locked() {
  if (ch_->flush() != proto::Status::kOk) lost(ch_->why());
}

void Connection::flusher() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return flush_pending_; });
    const uint64_t frames_before = frames_;
    // Let a burst of one-way calls gather into one write.
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lk.lock();
    flush_pending_ = false;
    if (broken_) continue;
    try {
      // Waiting storage changes ride in the next frame while the client keeps posting; once it
      // has gone quiet for a whole delay they go alone, so frees reach the server soon.
      if (!pending_allocs_.empty() || !pending_frees_.empty()) {
        if (frames_ == frames_before) {
          post_storage_locked();
        } else {
          flush_pending_ = true;
        }
      }
      flush_locked();
    } catch (...) {
      // Reported to the next caller by broken_.
    }
  }
}

void Connection::catch_up_if_free() {
  std::unique_lock<std::mutex> ck(call_mu_, std::try_to_lock);
  if (ck.owns_lock()) catch_up_after_idle_locked();  // else a call is reading: it sees the notices
}

void Connection::post(uint16_t op, const Writer& payload) {
  catch_up_if_free();
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) lost(broken_why_);
  append_frame(op, proto::kNoReply, 0, const_cast<Writer&>(payload).buf());
  ++posts_;
  ++generation_;
  schedule_flush_locked();
}

void Connection::post_bulk(uint16_t op, const Writer& head, const void* data, size_t n) {
  catch_up_if_free();
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) lost(broken_why_);
  append_frame(op, proto::kNoReply, 0, const_cast<Writer&>(head).buf(), data, n, true);
  ++posts_;
  ++generation_;
}

std::map<std::string, uint64_t> Connection::waits_by_reason() {
  std::lock_guard<std::mutex> lk(mu_);
  return waits_by_reason_;
}

namespace {

// Requests that change no storage's bytes on the server (generation()).
bool reads_only(uint16_t op) {
  return op == kTorchRead || op == kTorchReadMany || op == kTorchSync || op == kTorchDeviceProps ||
         op == kTorchMemory || op == kTorchEvent || op == kTorchHello;
}

}  // namespace

void Connection::lost_unlocked(const std::string& what) {
  std::lock_guard<std::mutex> lk(mu_);
  lost(what);
}

uint32_t Connection::send_request(uint16_t op, const Writer& payload, const std::string& why_wait) {
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) lost(broken_why_);
  uint32_t id = next_request_++;
  ++waits_;
  ++waits_by_reason_[why_wait];
  if (!reads_only(op)) ++generation_;
  append_frame(op, 0, id, const_cast<Writer&>(payload).buf(), nullptr, 0, true);
  return id;
}

void Connection::expect_reply(uint16_t op, uint32_t id, proto::FrameHeader* h) {
  for (;;) {
    if (ch_->receive(h, proto::Wait::kAwaiting) != proto::Status::kOk) lost_unlocked(ch_->why());
    if (h->op != proto::kOpNotice || (h->flags & proto::kReply)) break;
    take_notice(*h);
  }
  if (!(h->flags & proto::kReply) || h->request_id != id || h->op != op) lost_unlocked("a reply that does not match the request");
}

void Connection::take_notice(const proto::FrameHeader& h) {
  // A word from the server (a drain's, protocol/drain.h), not a reply: logged, or the reason the
  // session ended.
  Bytes notice(h.length);
  if (ch_->read_payload(notice.data(), notice.size()) != proto::Status::kOk) lost_unlocked(ch_->why());
  std::string why;
  if (proto::take_notice(*ch_, notice.data(), notice.size(), &why) != proto::NoticeAction::kDraining) lost_unlocked(why);
}

void Connection::catch_up_after_idle_locked() {
  const auto now = std::chrono::steady_clock::now();
  const bool idle = now - last_call_ > proto::kCatchUpAfterIdle;
  last_call_ = now;
  if (!idle) return;
  proto::FrameHeader h{};
  for (;;) {
    proto::Status st = ch_->receive(&h, proto::Wait::kPassive, std::chrono::milliseconds(0));
    if (st == proto::Status::kTimeout) return;
    if (st != proto::Status::kOk) lost_unlocked(ch_->why());
    if (h.op != proto::kOpNotice || (h.flags & proto::kReply)) lost_unlocked("a frame from the server that answers nothing");
    take_notice(h);
  }
}

std::vector<uint8_t> Connection::read_reply(uint16_t op, uint32_t id, ReplyStatus* st, size_t* body_at) {
  proto::FrameHeader h{};
  expect_reply(op, id, &h);
  std::vector<uint8_t> frame(h.length);
  if (ch_->read_payload(frame.data(), frame.size()) != proto::Status::kOk) lost_unlocked(ch_->why());
  Reader r(frame.data(), frame.size());
  if (!get_status(r, st)) lost_unlocked("a malformed reply");
  if (st->failed) {
    raise_deferred(*st);
    raise_error(st->kind, st->message);
  }
  *body_at = frame.size() - r.left();
  return frame;
}

void Connection::raise_deferred(const ReplyStatus& st) {
  if (st.has_deferred)
    raise_error(st.deferred_kind,
                "rgpu: " + st.deferred_op + " failed on rgpu-opserver: " + st.deferred_message +
                    "\n(it ran asynchronously: the error surfaced at the next operation that waited for the server; "
                    "the tensors it should have written are not valid)");
}

void Connection::read_bulk(uint16_t op, uint32_t id, const uint8_t* rest, size_t rest_len, const std::vector<Sink>& sinks) {
  Reader r(rest, rest_len);
  uint64_t want = 0;
  for (const Sink& s : sinks) want += s.n;
  uint64_t total = r.u64();
  if (!r.ok() || total != want) lost_unlocked("a reply of the wrong length");
  size_t sink = 0, at = 0;  // where the next byte goes: sinks[sink], offset at
  // Bytes in hand (the first frame's rest, from servers that put data there) are copied; the
  // frames that follow are read from the channel straight into the sinks.
  auto take = [&](const uint8_t* p, size_t n) {
    while (n) {
      while (sinks[sink].n == at) ++sink, at = 0;
      size_t k = std::min(n, sinks[sink].n - at);
      std::memcpy(static_cast<uint8_t*>(sinks[sink].p) + at, p, k);
      p += k, n -= k, at += k;
    }
  };
  uint64_t got = std::min<uint64_t>(r.left(), total);
  take(r.view(got), got);
  while (got < total) {
    proto::FrameHeader h{};
    expect_reply(op, id, &h);
    if (h.length > total - got) lost_unlocked("a reply longer than the bytes asked for");
    for (size_t n = h.length; n;) {
      while (sinks[sink].n == at) ++sink, at = 0;
      size_t k = std::min(n, sinks[sink].n - at);
      if (ch_->read_payload(static_cast<uint8_t*>(sinks[sink].p) + at, k) != proto::Status::kOk) lost_unlocked(ch_->why());
      n -= k, at += k;
    }
    got += h.length;
  }
}

Bytes Connection::call(uint16_t op, const Writer& payload, const std::string& why_wait, void* bulk, size_t bulk_len) {
  std::lock_guard<std::mutex> ck(call_mu_);
  catch_up_after_idle_locked();
  uint32_t id = send_request(op, payload, why_wait);
  ReplyStatus st;
  size_t at = 0;
  std::vector<uint8_t> first = read_reply(op, id, &st, &at);
  if (bulk) {
    read_bulk(op, id, first.data() + at, first.size() - at, {{bulk, bulk_len}});
    raise_deferred(st);  // after the whole reply is read, so the next call starts at a frame boundary
    return {};
  }
  raise_deferred(st);
  return Bytes(first.begin() + static_cast<ptrdiff_t>(at), first.end());
}

void Connection::call_scatter(uint16_t op, const Writer& payload, const std::string& why_wait, const std::vector<Sink>& sinks) {
  std::lock_guard<std::mutex> ck(call_mu_);
  catch_up_after_idle_locked();
  uint32_t id = send_request(op, payload, why_wait);
  ReplyStatus st;
  size_t at = 0;
  std::vector<uint8_t> first = read_reply(op, id, &st, &at);
  read_bulk(op, id, first.data() + at, first.size() - at, sinks);
  raise_deferred(st);
}

}  // namespace rgpu::torchdev
