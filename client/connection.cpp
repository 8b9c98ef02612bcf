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
#include <cstring>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "protocol/frame.h"
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

std::string identity() {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  const std::string& user = env::get().user;
  std::string prog = "unknown";
  if (FILE* f = fopen("/proc/self/comm", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof buf, f)) prog = std::string(buf, strcspn(buf, "\n"));
    fclose(f);
  }
  return log::format("%s@%s pid=%d prog=%s", user.empty() ? "?" : user.c_str(), host, static_cast<int>(getpid()), prog.c_str());
}

}  // namespace

Connection* Connection::open(const std::string& server, const std::string& token, std::string* err,
                             bool want_snapshot) {
  net::Address addr;
  // Several servers (comma-separated) are a later feature; the first one serves all devices now.
  std::string first = server.substr(0, server.find(','));
  if (!net::parse_address(first, 9713, &addr, err)) {
    *err += " (from RGPU_SERVER)";
    return nullptr;
  }
  int fd = net::connect_tcp(addr, err);
  if (fd < 0) {
    *err += "; is the server running? see rgpu-server --help";
    return nullptr;
  }
  net::set_recv_timeout(fd, env::get().connect_timeout_s);
  auto* c = new Connection();
  c->fd_ = fd;
  c->server_name_ = addr.str();
  const uint64_t caps = proto::kOurCapabilities | (want_snapshot ? uint64_t{proto::kCapPushedSnapshot} : 0);
  if (!proto::client_handshake(fd, token, identity(), c->server_name_, &c->hs_, err, caps)) {
    ::close(fd);
    delete c;
    return nullptr;
  }
  if (c->hs_.capabilities & proto::kCapPushedSnapshot) {
    proto::FrameHeader h{};
    std::string why;
    proto::ReadResult rr = proto::read_frame(fd, proto::kMaxPayload, &h, &c->pushed_snapshot_, &why);
    if (rr != proto::ReadResult::kOk || h.op != proto::kOpSnapshot || !(h.flags & proto::kReply) || h.request_id != 0) {
      *err = "rgpu-server at " + c->server_name_ + " did not send its device snapshot after the handshake (" +
             (rr != proto::ReadResult::kOk ? why : "it sent message " + std::to_string(h.op)) +
             "); are client and server the same rgpu release?";
      ::close(fd);
      delete c;
      return nullptr;
    }
    c->has_pushed_snapshot_ = true;
    c->bytes_received_.fetch_add(sizeof h + c->pushed_snapshot_.size(), std::memory_order_relaxed);
  }
  net::set_recv_timeout(fd, 0);  // replies to a long synchronize may take as long as the kernel
  c->flusher_ = std::thread([c] { c->idle_flusher(); });
  return c;
}

bool Connection::take_pushed_snapshot(std::vector<uint8_t>* payload) {
  if (!has_pushed_snapshot_) return false;
  has_pushed_snapshot_ = false;
  *payload = std::move(pushed_snapshot_);
  return true;
}

Connection::~Connection() {
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
  if (cb_thread_.joinable()) {
    ::shutdown(fd_, SHUT_RD);  // a callback thread in read_one() returns
    cb_thread_.join();
  }
  if (fd_ >= 0) ::close(fd_);
}

void Connection::mark_broken(const std::string& why) {
  if (!broken_.exchange(true)) {
    log::error("lost the connection to rgpu-server at %s: %s; the GPU work of this process cannot continue",
               server_name_.c_str(), why.c_str());
  }
}

bool Connection::flush_locked() {
  if (batch_.empty()) return !broken_;
  std::lock_guard<std::mutex> wlock(write_mu_);
  WriteTimer timer(&write_us_);
  bool ok = !broken_ && net::write_full(fd_, batch_.data(), batch_.size());
  batch_.clear();
  if (!ok) mark_broken("sending failed (the server closed the connection or the network is down)");
  return ok;
}

bool Connection::flush() {
  std::lock_guard<std::mutex> lock(send_mu_);
  return flush_locked();
}

bool Connection::send_oneway(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                             size_t extra_len) {
  oneway_calls_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(send_mu_);
  if (broken_) return false;
  bool was_empty = batch_.empty();
  bytes_sent_.fetch_add(sizeof(proto::FrameHeader) + args_len + extra_len, std::memory_order_relaxed);
  proto::FrameHeader h =
      proto::make_header(op, proto::kNoReply, next_request_++, thread_id, args_len + extra_len);
  if (extra_len >= kDirectSendBytes) {
    // Bulk data goes straight from the caller's memory to the socket, behind what is queued.
    iovec iov[4] = {{batch_.data(), batch_.size()},
                    {&h, sizeof h},
                    {const_cast<void*>(args), args_len},
                    {const_cast<void*>(extra), extra_len}};
    std::lock_guard<std::mutex> wlock(write_mu_);
    WriteTimer timer(&write_us_);
    bool ok = net::writev_full(fd_, iov, 4);
    batch_.clear();
    if (!ok) mark_broken("sending failed (the server closed the connection or the network is down)");
    return ok;
  }
  const auto* hp = reinterpret_cast<const uint8_t*>(&h);
  batch_.insert(batch_.end(), hp, hp + sizeof h);
  const auto* ap = static_cast<const uint8_t*>(args);
  batch_.insert(batch_.end(), ap, ap + args_len);
  if (extra_len) {
    const auto* ep = static_cast<const uint8_t*>(extra);
    batch_.insert(batch_.end(), ep, ep + extra_len);
  }
  if (batch_.size() >= kFlushBytes) return flush_locked();
  if (was_empty) flush_cv_.notify_one();
  return true;
}

void Connection::idle_flusher() {
  std::unique_lock<std::mutex> lock(send_mu_);
  while (!stop_) {
    flush_cv_.wait(lock, [&] { return stop_ || !batch_.empty(); });
    if (stop_) break;
    // Give the program a moment to add more calls to the batch, then send what is there. The
    // batch is swapped out and written without send_mu_, so the program keeps queueing calls
    // while the write runs; write_mu_, taken before send_mu_ is let go, keeps later writers
    // behind it.
    flush_cv_.wait_for(lock, kIdleFlush, [&] { return stop_; });
    if (batch_.empty() || broken_) continue;
    std::unique_lock<std::mutex> wlock(write_mu_);
    sending_.swap(batch_);
    lock.unlock();
    bool ok = net::write_full(fd_, sending_.data(), sending_.size());
    sending_.clear();
    wlock.unlock();
    if (!ok) mark_broken("sending failed (the server closed the connection or the network is down)");
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
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (broken_) return 0;
    id = next_request_++;
    if (id == 0) id = next_request_++;  // 0 means "not sent"
    {
      std::lock_guard<std::mutex> rlock(recv_mu_);
      pending_[id] = slot;
    }
    proto::FrameHeader h = proto::make_header(op, 0, id, thread_id, args_len + extra_len);
    bytes_sent_.fetch_add(sizeof h + args_len + extra_len, std::memory_order_relaxed);
    bool ok;
    std::lock_guard<std::mutex> wlock(write_mu_);
    WriteTimer timer(&write_us_);
    if (batch_.empty()) {
      ok = proto::write_frame(fd_, op, 0, id, thread_id, args, args_len, extra, extra_len);
    } else {
      iovec iov[4] = {{batch_.data(), batch_.size()},
                      {&h, sizeof h},
                      {const_cast<void*>(args), args_len},
                      {const_cast<void*>(extra), extra_len}};
      ok = net::writev_full(fd_, iov, extra_len ? 4 : 3);
      batch_.clear();
    }
    if (!ok) {
      mark_broken("sending failed (the server closed the connection or the network is down)");
      std::lock_guard<std::mutex> rlock(recv_mu_);
      pending_.erase(id);
      return 0;
    }
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

bool Connection::fill_some() {
  if (rbeg_ == rend_) rbeg_ = rend_ = 0;
  if (rend_ == rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rbeg_, rend_ - rbeg_);
    rend_ -= rbeg_;
    rbeg_ = 0;
  }
  // Busy-poll a little before sleeping in read(2): a small call's reply usually arrives within
  // tens of microseconds, and a sleeping reader adds a wake-up to every round trip.
  auto deadline = std::chrono::steady_clock::now() + kReplySpin;
  for (int polls = 0;; ++polls) {
    ssize_t r = ::recv(fd_, rbuf_.data() + rend_, rbuf_.size() - rend_, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((polls & 63) != 63 || std::chrono::steady_clock::now() < deadline) continue;
      r = ::read(fd_, rbuf_.data() + rend_, rbuf_.size() - rend_);
    }
    if (r > 0) {
      rend_ += static_cast<size_t>(r);
      return true;
    }
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

bool Connection::recv_exact(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t have = std::min(n, rend_ - rbeg_);
  std::memcpy(out, rbuf_.data() + rbeg_, have);
  rbeg_ += have;
  if (have == n) return true;
  // Large remainders (bulk data) go straight to their destination.
  if (n - have >= rbuf_.size() / 2) return net::read_full(fd_, out + have, n - have) == static_cast<ssize_t>(n - have);
  while (have < n) {
    if (!fill_some()) return false;
    size_t take = std::min(n - have, rend_ - rbeg_);
    std::memcpy(out + have, rbuf_.data() + rbeg_, take);
    rbeg_ += take;
    have += take;
  }
  return true;
}

bool Connection::read_one() {
  proto::FrameHeader h{};
  if (rbeg_ == rend_ && !fill_some()) {
    mark_broken("the server closed the connection");
    return false;
  }
  if (!recv_exact(&h, sizeof h)) {
    mark_broken("the connection broke in the middle of a frame header");
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
    if (h.length != sizeof payload || !recv_exact(payload, sizeof payload) || !proto::wire::read_callback(r, &cb)) {
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
    if (h.length < sizeof head || !recv_exact(head, sizeof head)) {
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
    if (n && !recv_exact(dst, n)) {
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
    if (!recv_exact(text.data(), text.size())) {
      mark_broken("the connection broke in the middle of device output");
      return false;
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  if (h.op == proto::kOpMappedUpdate && !(h.flags & proto::kReply)) {
    // What kernels wrote to mapped host memory (client/mapped_memory.h), before the reply it
    // precedes.
    std::vector<uint8_t> payload(h.length);
    if (!recv_exact(payload.data(), payload.size())) {
      mark_broken("the connection broke in the middle of a mapped-memory update");
      return false;
    }
    MappedUpdateHandler apply = mapped_handler_.load();
    if (!apply || !apply(payload.data(), payload.size())) {
      mark_broken(log::format("the server sent a mapped-memory update outside any mapped buffer (%u bytes)", h.length));
      return false;
    }
    return true;
  }
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
  if ((head && !recv_exact(slot->payload.data(), head)) || (tail && !recv_exact(slot->sink, tail))) {
    mark_broken("the connection broke in the middle of a reply");
    return false;
  }
  slot->sink_got = tail;
  std::lock_guard<std::mutex> lock(recv_mu_);
  pending_.erase(h.request_id);
  slot->done = true;
  return true;
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
  std::lock_guard<std::mutex> lock(send_mu_);
  if (broken_) return false;
  proto::FrameHeader h = proto::make_header(op, proto::kNoReply, next_request_++, 0, len);
  bytes_sent_.fetch_add(sizeof h + len, std::memory_order_relaxed);
  const auto* hp = reinterpret_cast<const uint8_t*>(&h);
  batch_.insert(batch_.end(), hp, hp + sizeof h);
  const auto* pp = static_cast<const uint8_t*>(payload);
  batch_.insert(batch_.end(), pp, pp + len);
  return flush_locked();
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
      if (h) h(n.id, n.status, n.run);
      lock.lock();
      continue;
    }
    if (awaited_ && !reading_ && !broken_) {
      reading_ = true;
      lock.unlock();
      bool ok = true;
      pollfd p{fd_, POLLIN, 0};
      if (rend_ > rbeg_ || ::poll(&p, 1, kPollMs) > 0) ok = read_one();
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
