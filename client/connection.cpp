// Implementation of client/connection.h.
#include "client/connection.h"

#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/drain.h"
#include "protocol/frame.h"
#include "protocol/client_session.h"
#include "protocol/transport.h"
#include "protocol/wire/control.h"
#include "protocol/wire/copy.h"

namespace rgpu::client {
namespace {

constexpr auto kIdleFlush = std::chrono::microseconds(200);

// Adds the time from construction to destruction to *total (Connection::write_us).
class WriteTimer {
 public:
  explicit WriteTimer(std::atomic<uint64_t>* total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~WriteTimer() {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_);
    total_->fetch_add(static_cast<uint64_t>(us.count()), std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t>* total_;
  std::chrono::steady_clock::time_point start_;
};

// Every connection this process opened (the CUDA shim's, the NVML shim's), told goodbye at exit.
std::mutex& g_open_mu = *new std::mutex;
std::vector<Connection*>& g_open = *new std::vector<Connection*>;

void goodbye_all() {
  std::lock_guard<std::mutex> lock(g_open_mu);
  for (Connection* c : g_open) c->goodbye();
}

}  // namespace

Connection* Connection::open(const std::string& server, const std::string& token, std::string* err,
                             bool want_snapshot) {
  net::Address addr;
  bool tls = false;
  if (!proto::parse_server_address(server, 9713, &addr, &tls, err)) {
    *err += " (from RGPU_SERVER)";
    return nullptr;
  }
  proto::ClientSessionOptions o;
  if (tls && !(o.tls = proto::tls_client_context(proto::TlsClientConfig::from_env(), err))) return nullptr;
  const env::Settings& settings = env::get();
  auto* c = new Connection();
  c->server_name_ = addr.str();
  o.address = addr;
  o.token = token;
  o.identity = proto::client_identity();
  o.capabilities = proto::kOurCapabilities | (want_snapshot ? uint64_t{proto::kCapPushedSnapshot} : 0);
  o.connect_timeout = std::chrono::seconds(settings.connect_timeout_s);
  o.fix = "is the server running? see rgpu-server --help (RGPU_CONNECT_TIMEOUT sets how long to keep trying)";
  // The snapshot the server pushes behind the handshake.
  const auto snapshot_wait = std::chrono::seconds(settings.connect_timeout_s);
  o.after_handshake = [c, snapshot_wait](int, proto::Transport& t, const proto::ClientHandshakeResult& hs,
                                         std::string* why) {
    if (!(hs.capabilities & proto::kCapPushedSnapshot)) return proto::Attempt::kDone;
    proto::FrameHeader h{};
    std::string rwhy;
    proto::ReadResult rr = proto::read_frame(t, proto::kMaxPayload, &h, &c->pushed_snapshot_, &rwhy,
                                             proto::Clock::now() + snapshot_wait);
    if (rr != proto::ReadResult::kOk || h.op != proto::kOpSnapshot || !(h.flags & proto::kReply) || h.request_id != 0) {
      *why = "rgpu-server at " + c->server_name_ + " did not send its device snapshot after the handshake (" +
             (rr != proto::ReadResult::kOk ? rwhy : "it sent message " + std::to_string(h.op)) +
             "); are client and server the same rgpu release?";
      return rr == proto::ReadResult::kClosed ? proto::Attempt::kRetry : proto::Attempt::kGiveUp;
    }
    c->has_pushed_snapshot_ = true;
    c->bytes_received_.fetch_add(sizeof h + c->pushed_snapshot_.size(), std::memory_order_relaxed);
    return proto::Attempt::kDone;
  };
  proto::ClientSession session;
  if (!proto::open_client_session(o, &session, err)) {
    delete c;
    return nullptr;
  }
  c->hs_ = session.handshake;
  c->ch_ = std::move(session.channel);
  c->flusher_ = std::thread([c] { c->idle_flusher(); });
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    if (g_open.empty()) std::atexit(goodbye_all);
    g_open.push_back(c);
  }
  return c;
}

bool Connection::take_pushed_snapshot(std::vector<uint8_t>* payload) {
  if (!has_pushed_snapshot_) return false;
  has_pushed_snapshot_ = false;
  *payload = std::move(pushed_snapshot_);
  return true;
}

std::unique_ptr<Connection> Connection::over(std::unique_ptr<proto::Channel> channel, const std::string& server_name) {
  std::unique_ptr<Connection> c(new Connection());
  c->server_name_ = server_name;
  c->ch_ = std::move(channel);
  return c;
}

Connection::~Connection() {
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    std::erase(g_open, this);
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    stop_ = true;
  }
  flush_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    cb_stop_ = true;
  }
  cb_cv_.notify_all();
  if (ch_) ch_->close("the connection was closed");  // a callback thread in read_one() returns
  if (cb_thread_.joinable()) cb_thread_.join();
}

void Connection::mark_broken(const std::string& why) {
  if (!broken_.exchange(true)) {
    log::error("lost the session on rgpu-server at %s: %s; the GPU work of this process cannot continue",
               server_name_.c_str(), why.c_str());
  }
}

// A channel status from sending: only kLost is a failure (a broken connection is repaired).
bool Connection::sent(proto::Status s) {
  if (s == proto::Status::kOk) return true;
  mark_broken(ch_->why());
  return false;
}

bool Connection::flush() {
  if (broken_) return false;
  return sent(ch_->flush());
}

bool Connection::send_oneway(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                             size_t extra_len) {
  oneway_calls_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(sizeof(proto::FrameHeader) + args_len + extra_len, std::memory_order_relaxed);
  iovec parts[2] = {{const_cast<void*>(args), args_len}, {const_cast<void*>(extra), extra_len}};
  catch_up_after_idle();
  std::unique_lock<std::mutex> lock(send_mu_);
  if (broken_) return false;
  const bool now = extra_len >= kDirectSendBytes;  // bulk data: out at once, behind what is queued
  WriteTimer timer(&write_us_);
  if (!sent(ch_->send(op, proto::kNoReply, next_request_++, thread_id, parts, extra_len ? 2 : 1, now))) return false;
  if (now) return true;
  if (ch_->unflushed() >= kFlushBytes) return sent(ch_->flush());
  if (!queued_) {
    queued_ = true;
    flush_cv_.notify_one();
  }
  return true;
}

void Connection::idle_flusher() {
  std::unique_lock<std::mutex> lock(send_mu_);
  while (!stop_) {
    flush_cv_.wait(lock, [&] { return stop_ || queued_; });
    if (stop_) break;
    // Give the program a moment to add more calls to the queue, then send what is there.
    flush_cv_.wait_for(lock, kIdleFlush, [&] { return stop_; });
    queued_ = false;
    if (broken_ || ch_->unflushed() == 0) continue;
    lock.unlock();
    if (ch_->flush() != proto::Status::kOk) mark_broken(ch_->why());
    lock.lock();
  }
}

bool Connection::call(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                      size_t extra_len, ReplySlot* slot) {
  uint32_t id = submit(op, thread_id, args, args_len, extra, extra_len, slot);
  return id != 0 && wait(id, slot);
}

uint32_t Connection::submit(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                            size_t extra_len, ReplySlot* slot) {
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  iovec parts[2] = {{const_cast<void*>(args), args_len}, {const_cast<void*>(extra), extra_len}};
  catch_up_after_idle();
  std::lock_guard<std::mutex> lock(send_mu_);
  if (broken_) return 0;
  uint32_t id = next_request_++;
  if (id == 0) id = next_request_++;  // 0 means "not sent"
  {
    std::lock_guard<std::mutex> rlock(recv_mu_);
    pending_[id] = slot;
  }
  bytes_sent_.fetch_add(sizeof(proto::FrameHeader) + args_len + extra_len, std::memory_order_relaxed);
  WriteTimer timer(&write_us_);
  if (!sent(ch_->send(op, 0, id, thread_id, parts, extra_len ? 2 : 1, true))) {
    std::lock_guard<std::mutex> rlock(recv_mu_);
    pending_.erase(id);
    return 0;
  }
  return id;
}

bool Connection::wait(uint32_t id, ReplySlot* slot) {
  std::unique_lock<std::mutex> lock(recv_mu_);
  while (!slot->done) {
    if (broken_) {
      pending_.erase(id);
      return false;
    }
    if (!reading_) {
      reading_ = true;
      lock.unlock();
      bool ok = read_one();
      lock.lock();
      reading_ = false;
      if (!ok) fail_pending_locked();
      recv_cv_.notify_all();
      if (awaited_) cb_cv_.notify_one();  // the callback thread may take the reader role now
    } else {
      recv_cv_.wait(lock);
    }
  }
  return !slot->failed;
}

void Connection::fail_pending_locked() {
  for (auto& [rid, s] : pending_) {
    s->failed = true;
    s->done = true;
  }
  pending_.clear();
}

bool Connection::read_payload(void* dst, size_t n) {
  if (ch_->read_payload(dst, n) == proto::Status::kOk) return true;
  mark_broken(ch_->why());
  return false;
}

bool Connection::read_one(std::chrono::milliseconds timeout, bool* idle) {
  proto::FrameHeader h{};
  proto::Status st = ch_->receive(&h, proto::Wait::kAwaiting, timeout);
  if (st == proto::Status::kTimeout && idle) {
    *idle = true;
    return true;
  }
  if (st != proto::Status::kOk) {
    mark_broken(ch_->why());
    return false;
  }
  bytes_received_.fetch_add(sizeof h + h.length, std::memory_order_relaxed);
  if (h.length > proto::kMaxPayload) {
    mark_broken(log::format("the server sent a frame of %u bytes, over the limit of %u", h.length, proto::kMaxPayload));
    return false;
  }
  if (h.op == proto::kOpCallback && !(h.flags & proto::kReply)) {
    uint8_t payload[proto::wire::kCallbackFrame];
    proto::wire::Callback cb;
    Reader r(payload, sizeof payload);
    if (h.length != sizeof payload || !read_payload(payload, sizeof payload) || !proto::wire::read_callback(r, &cb)) {
      mark_broken(log::format("the server sent a malformed host-callback frame (%u bytes)", h.length));
      return false;
    }
    std::lock_guard<std::mutex> lock(recv_mu_);
    ready_.push_back({cb.id, cb.status, cb.run != 0});
    if (awaited_) --awaited_;
    cb_cv_.notify_one();
    return true;
  }
  if (h.op == proto::kOpAsyncData && !(h.flags & proto::kReply)) {
    // An async device-to-host copy's bytes, straight into the buffer registered for them.
    uint8_t head[proto::wire::kAsyncDataHead];
    if (h.length < sizeof head || !read_payload(head, sizeof head)) {
      mark_broken("the server sent a malformed async-copy frame");
      return false;
    }
    uint64_t id;
    int32_t status;
    Reader hr(head, sizeof head);
    proto::wire::read_async_data_head(hr, &id, &status);
    size_t n = h.length - sizeof head;
    AsyncDest dest = async_dest_.load();
    void* dst = dest ? dest(id, status, n) : nullptr;
    if (!dst || (status != 0 && n != 0)) {
      mark_broken(log::format("the server sent %zu bytes for async copy %llu, which this process is not waiting "
                              "for in that size", n, static_cast<unsigned long long>(id)));
      return false;
    }
    if (n && !read_payload(dst, n)) {
      mark_broken("the connection broke in the middle of async-copy data");
      return false;
    }
    if (AsyncDone done = async_done_.load()) done(id, status);
    return true;
  }
  if (h.op == proto::kOpDeviceOutput && !(h.flags & proto::kReply)) {
    // What kernels printed, before the reply of the synchronizing call that flushed it: into
    // this process's stdout, through stdio so it keeps its place among the program's own lines.
    std::vector<char> text(h.length);
    if (!read_payload(text.data(), text.size())) {
      mark_broken("the connection broke in the middle of device output");
      return false;
    }
    if (text.empty()) return true;  // nothing printed (fwrite must not get the empty vector's null)
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  if (h.op == proto::kOpMappedUpdate && !(h.flags & proto::kReply)) {
    // What kernels wrote to mapped host memory (client/mapped_memory.h), before the reply it
    // precedes.
    std::vector<uint8_t> payload(h.length);
    if (!read_payload(payload.data(), payload.size())) {
      mark_broken("the connection broke in the middle of a mapped-memory update");
      return false;
    }
    MappedUpdateHandler apply = mapped_handler_.load();
    if (!apply || !apply(*this, payload.data(), payload.size())) {
      mark_broken(log::format("the server sent a mapped-memory update outside any mapped buffer (%u bytes)", h.length));
      return false;
    }
    return true;
  }
  if (h.op == proto::kOpNotice && !(h.flags & proto::kReply)) return take_notice(h.length);
  ReplySlot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    auto it = pending_.find(h.request_id);
    if (it != pending_.end()) slot = it->second;
  }
  if (!(h.flags & proto::kReply) || !slot) {
    mark_broken(log::format("the server sent a frame for unknown request %u", h.request_id));
    return false;
  }
  size_t head = h.length;
  if (slot->sink && h.length > slot->sink_prefix) head = slot->sink_prefix;
  size_t tail = h.length - head;
  if (tail > slot->sink_cap) {
    mark_broken(log::format("the server sent %zu bytes for a %zu-byte buffer", tail, slot->sink_cap));
    return false;
  }
  slot->payload.resize(head);
  if ((head && !read_payload(slot->payload.data(), head)) || (tail && !read_payload(slot->sink, tail))) {
    mark_broken("the connection broke in the middle of a reply");
    return false;
  }
  slot->sink_got = tail;
  std::lock_guard<std::mutex> lock(recv_mu_);
  pending_.erase(h.request_id);
  slot->done = true;
  return true;
}

// A word from the server (kOpNotice, protocol/drain.h), not a reply to anything: logged at once.
// It is read like any frame, by whichever thread reads: while a thread waits for a reply, or, when
// the program was making no calls as it came, before its next call (catch_up_after_idle).
bool Connection::take_notice(uint32_t length) {
  std::vector<uint8_t> payload(length);
  if (!read_payload(payload.data(), payload.size())) {
    mark_broken("the connection broke in the middle of a notice from the server");
    return false;
  }
  std::string why;
  switch (proto::take_notice(*ch_, payload.data(), payload.size(), &why)) {
    case proto::NoticeAction::kDraining:
      return true;
    case proto::NoticeAction::kEnded:
      broken_.store(true);
      return false;
    case proto::NoticeAction::kMalformed:
      break;
  }
  mark_broken(why);
  return false;
}

// A program that made no call for a while was reading nothing, so a notice that came meanwhile
// (a draining server's) waits unread; and if the server has since ended the session and closed the
// connection, the call's own write could break the connection before anything is read, losing the
// notice with the reason, and the channel would redial a server that is gone. So the first call
// after proto::kCatchUpAfterIdle without one reads what has arrived (without waiting) before it goes out. Cost:
// a clock read per call, and one read of the socket after each idle second.
void Connection::catch_up_after_idle() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  const int64_t last = last_call_ns_.exchange(now, std::memory_order_relaxed);
  if (last == 0 || now - last < std::chrono::nanoseconds(proto::kCatchUpAfterIdle).count()) return;
  std::unique_lock<std::mutex> lock(recv_mu_);
  if (reading_ || broken_) return;  // a reader is there already: it reads the notice
  reading_ = true;
  lock.unlock();
  bool ok = true, idle = false;
  for (int frames = 0; ok && !idle && frames < 64; ++frames) ok = read_one(std::chrono::milliseconds(0), &idle);
  lock.lock();
  reading_ = false;
  if (!ok) fail_pending_locked();
  recv_cv_.notify_all();
  if (awaited_) cb_cv_.notify_one();
}

}  // namespace rgpu::client

namespace rgpu::client {

void Connection::set_callback_handler(CallbackHandler h) {
  std::lock_guard<std::mutex> lock(recv_mu_);
  cb_handler_ = h;
}

void Connection::expect_callback() {
  std::lock_guard<std::mutex> lock(recv_mu_);
  ++awaited_;
  if (!cb_thread_.joinable()) cb_thread_ = std::thread([this] { callback_loop(); });
  cb_cv_.notify_one();
}

bool Connection::send_control(uint16_t op, const void* payload, size_t len) {
  iovec part{const_cast<void*>(payload), len};
  std::lock_guard<std::mutex> lock(send_mu_);
  if (broken_) return false;
  bytes_sent_.fetch_add(sizeof(proto::FrameHeader) + len, std::memory_order_relaxed);
  return sent(ch_->send(op, proto::kNoReply, next_request_++, 0, &part, 1, true));
}

void Connection::goodbye() {
  std::lock_guard<std::mutex> lock(send_mu_);
  if (broken_) return;
  proto::send_goodbye(*ch_, next_request_++);
}

void Connection::callback_loop() {
  // How long the callback thread holds the reader role before it looks at its queue again.
  constexpr int kPollMs = 20;
  std::unique_lock<std::mutex> lock(recv_mu_);
  while (!cb_stop_) {
    if (!ready_.empty()) {
      Notice n = ready_.front();
      ready_.erase(ready_.begin());
      CallbackHandler h = cb_handler_;
      lock.unlock();
      if (h) h(*this, n.id, n.status, n.run);
      lock.lock();
      continue;
    }
    if (awaited_ && !reading_ && !broken_) {
      reading_ = true;
      lock.unlock();
      bool idle = false;
      bool ok = read_one(std::chrono::milliseconds(kPollMs), &idle);
      lock.lock();
      reading_ = false;
      if (!ok) fail_pending_locked();
      recv_cv_.notify_all();
      continue;
    }
    cb_cv_.wait(lock);
  }
}

}  // namespace rgpu::client
