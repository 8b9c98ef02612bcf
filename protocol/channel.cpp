// Implementation of protocol/channel.h. The wire is specified in protocol/messages.h ("The
// channel", kOpChannelOpen .. kOpResumed); the design in protocol/README.md.
#include "protocol/channel.h"

#include <algorithm>
#include <cstring>

#include "common/env.h"
#include "common/log.h"
#include "protocol/frame.h"
#include "protocol/tls.h"

namespace rgpu::proto {

// A run of whole channel frames (ChannelHeader, FrameHeader, payload) in the replay buffer. Its
// memory never moves, so a writer may write its first `used` bytes without the lock while others
// append behind them; shared_ptr keeps a block alive for a write in progress after it is acked.
struct Channel::Block {
  std::unique_ptr<uint8_t[]> data;
  size_t cap = 0, used = 0, written = 0;
  uint64_t last_seq = 0;
};

// A data frame read by a writer that waited for acknowledgements, kept for the next receive().
struct Channel::Inbound {
  uint64_t seq;
  FrameHeader h;
  Bytes payload;
};

namespace {

constexpr size_t kChannelFrameHead = sizeof(ChannelHeader) + sizeof(FrameHeader);
// Replay blocks hold this much (a frame larger than that gets a block of its own).
constexpr size_t kBlockBytes = 256 << 10;
constexpr size_t kReadBuffer = 256 << 10;
// On a healthy link acknowledgements are asked for well before the bound, so the replay buffer
// stays small (and its blocks are reused warm) instead of filling up before the first ack. A
// sender that never reads (a stream of one-way calls) collects the answer itself, without
// waiting, once twice this much is held (wait_for_room): the buffer then stays within the spare
// blocks, where fresh blocks would page-fault on every byte (channel_bench's one-way stream lost
// 42% of its throughput to that).
constexpr size_t kAskForAcksBytes = 2 << 20;
// Acknowledged blocks kept for reuse, up to this many bytes: fresh ones cost page faults on
// every byte (a bulk upload's 1 MiB frames each took a fresh block, and uploads ran at 55% of
// their speed before the channel).
constexpr size_t kSpareBytes = 32 << 20;

using Nonce = std::array<uint8_t, 32>;

std::string_view key_of(const crypto::Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

// Over TLS the proofs end with the connection's exporter value (protocol/tls.h), as the
// handshake's do: a relay that terminates TLS cannot pass them on.
struct TlsBinding {
  uint8_t value[32];
  bool tls = false;
  explicit TlsBinding(Transport& t) { tls = t.export_key(kResumeProofExporter, value); }
};

crypto::Digest resume_proof(const crypto::Digest& secret, const char* label, const SessionId& session,
                            const Nonce& first, const Nonce& second, uint64_t received, const TlsBinding& binding) {
  Writer w;
  w.append(label, std::strlen(label));
  w.append(session.data(), session.size());
  w.append(first.data(), first.size());
  w.append(second.data(), second.size());
  w.put_u64(received);
  if (binding.tls) w.append(binding.value, sizeof binding.value);
  return crypto::hmac_sha256(key_of(secret), w.buf().data(), w.size());
}

bool write_plain(Transport& t, uint16_t op, const std::vector<uint8_t>& payload) {
  FrameHeader h = make_header(op, 0, 0, 0, payload.size());
  iovec iov[2] = {{&h, sizeof h}, {const_cast<uint8_t*>(payload.data()), payload.size()}};
  return t.write(iov, payload.empty() ? 1 : 2);
}

// Reads exactly n bytes (frame.h's read_exact: never more, what follows belongs to whoever reads
// next), saying why not in the resume's own words.
bool read_resume_bytes(Transport& t, void* dst, size_t n, Clock::time_point deadline, std::string* why) {
  std::string detail;
  if (read_exact(t, dst, n, deadline, &detail) == ReadResult::kOk) return true;
  *why = Clock::now() >= deadline ? "timed out" : "the connection closed";
  return false;
}

// One plain frame (the resume exchange, like the handshake, has no ChannelHeader).
bool read_plain(Transport& t, FrameHeader* h, std::vector<uint8_t>* payload, Clock::time_point deadline,
                std::string* why) {
  if (!read_resume_bytes(t, h, sizeof *h, deadline, why)) return false;
  if (h->length > kMaxHandshakePayload) {
    *why = log::format("a resume message of %u bytes is over the limit of %u", h->length, kMaxHandshakePayload);
    return false;
  }
  payload->resize(h->length);
  return read_resume_bytes(t, payload->data(), h->length, deadline, why);
}

std::string refused_reason(const std::vector<uint8_t>& payload) {
  Reader r(payload.data(), payload.size());
  std::string reason = r.str(kMaxHandshakePayload);
  return r.ok() ? reason : "(no reason given)";
}

}  // namespace

// ---- Wire messages ----

void encode(const ChannelOpen& m, Writer* w) {
  w->put_u16(m.version);
  w->append(m.public_key.data(), m.public_key.size());
  w->put_u32(m.resume_window_s);
}
void encode(const ResumeHello& m, Writer* w) {
  w->append(m.session.data(), m.session.size());
  w->append(m.nonce.data(), m.nonce.size());
}
void encode(const ResumeChallenge& m, Writer* w) {
  w->append(m.nonce.data(), m.nonce.size());
  w->append(m.proof.data(), m.proof.size());
  w->put_u64(m.received);
}
void encode(const ResumeProof& m, Writer* w) {
  w->append(m.proof.data(), m.proof.size());
  w->put_u64(m.received);
}
bool decode(Reader& r, ChannelOpen* m) {
  m->version = r.u16();
  r.take(m->public_key.data(), m->public_key.size());
  m->resume_window_s = r.u32();
  return r.ok() && r.left() == 0 && m->version == kChannelVersion;
}
bool decode(Reader& r, ResumeHello* m) {
  r.take(m->session.data(), m->session.size());
  r.take(m->nonce.data(), m->nonce.size());
  return r.ok() && r.left() == 0;
}
bool decode(Reader& r, ResumeChallenge* m) {
  r.take(m->nonce.data(), m->nonce.size());
  r.take(m->proof.data(), m->proof.size());
  m->received = r.u64();
  return r.ok() && r.left() == 0;
}
bool decode(Reader& r, ResumeProof* m) {
  r.take(m->proof.data(), m->proof.size());
  m->received = r.u64();
  return r.ok() && r.left() == 0;
}

bool read_resume_hello(Transport& t, ResumeHello* out, std::string* why, std::chrono::milliseconds timeout) {
  FrameHeader h{};
  std::vector<uint8_t> payload;
  if (!read_plain(t, &h, &payload, Clock::now() + timeout, why)) return false;
  Reader r(payload.data(), payload.size());
  if (h.op != kOpResume || !decode(r, out)) {
    *why = log::format("expected a resume (message %u), got message %u of %u bytes", kOpResume, h.op, h.length);
    return false;
  }
  return true;
}

ChannelOptions ChannelOptions::from_env() {
  const env::Settings& s = env::get();
  ChannelOptions o;
  o.replay_max_bytes = s.replay_max_mb << 20;
  o.heartbeat = std::chrono::seconds(s.heartbeat_s);
  o.resume_window = std::chrono::seconds(s.reconnect_s);
  return o;
}

// ---- Life ----

Channel::Channel(Side side, const SessionId& session, std::string token, ChannelOptions options)
    : Channel(side, session, std::move(token), std::move(options), crypto::x25519_keypair()) {}

Channel::Channel(Side side, const SessionId& session, std::string token, ChannelOptions options,
                 const crypto::KeyPair& keys)
    : side_(side), session_(session), token_(std::move(token)), options_(std::move(options)), keys_(keys),
      rbuf_(new uint8_t[kReadBuffer]) {}

Channel::~Channel() {
  close("the channel was destroyed");
  if (resender_.joinable()) resender_.join();
}

bool Channel::start(std::shared_ptr<Transport> transport) {
  std::unique_lock<std::mutex> lk(mu_);
  transport_ = std::move(transport);
  gen_ = 1;
  connected_ = true;
  last_rx_ = Clock::now();
  Writer w;
  encode(ChannelOpen{kChannelVersion, keys_.public_key,
                     static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(options_.resume_window).count())},
         &w);
  ChannelHeader ch{0, 0};
  FrameHeader fh = make_header(kOpChannelOpen, 0, 0, 0, w.size());
  iovec iov[3] = {{&ch, sizeof ch}, {&fh, sizeof fh}, {w.buf().data(), w.size()}};
  auto t = transport_;
  writer_active_ = true;
  lk.unlock();
  bool ok = t->write(iov, 3);
  lk.lock();
  writer_active_ = false;
  cv_.notify_all();
  if (!ok) break_locked(gen_, "the connection closed before the channel opened");
  return ok;
}

void Channel::set_redial(Redial redial) {
  std::lock_guard<std::mutex> lk(mu_);
  redial_ = std::move(redial);
}

void Channel::break_connection(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  break_locked(gen_, why);
}

void Channel::close(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  lose_locked(why);
}

bool Channel::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

std::string Channel::why() const {
  std::lock_guard<std::mutex> lk(mu_);
  return why_;
}

ChannelStats Channel::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  ChannelStats s = stats_;
  s.replay_bytes = replay_bytes_;
  return s;
}

size_t Channel::unflushed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return unflushed_;
}

void Channel::break_locked(uint64_t gen, const std::string& why) {
  if (gen != gen_ || !connected_ || lost_) return;  // an older connection's late news, or already known
  if (end_on_break_) {
    lose_locked(options_.peer + " left (" + why + ")");
    return;
  }
  connected_ = false;
  broken_at_ = Clock::now();
  transport_->shutdown();
  if (options_.on_connection) options_.on_connection(false);
  if (side_ == Side::kClient) {
    log::warn("%s with %s; reconnecting", why.c_str(), options_.peer.c_str());
  } else {
    log::warn("%s with %s; keeping the session for %lld s for it to come back", why.c_str(), options_.peer.c_str(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(options_.resume_window).count()));
  }
  cv_.notify_all();
}

void Channel::resume_until(Clock::time_point until, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  resume_until_ = until;
  resume_until_why_ = why;
}

void Channel::end_on_break() {
  std::lock_guard<std::mutex> lk(mu_);
  end_on_break_ = true;
}

void Channel::lose_locked(const std::string& why) {
  if (lost_) return;
  lost_ = true;
  why_ = why;
  connected_ = false;
  if (transport_) transport_->shutdown();
  if (pending_resume_) pending_resume_->shutdown();
  cv_.notify_all();
}

// ---- Sending ----

Status Channel::send(uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const iovec* parts,
                     int count, bool flush) {
  size_t payload = 0;
  for (int i = 0; i < count; ++i) payload += parts[i].iov_len;
  std::unique_lock<std::mutex> lk(mu_);
  if (payload > options_.max_payload) {
    // A caller's bug, not the peer's; the frame could never be read.
    lose_locked(log::format("a frame of %zu bytes (op %u) is over the limit of %u", payload, op, options_.max_payload));
    return Status::kLost;
  }
  if (!wait_for_room(lk, kChannelFrameHead + payload)) return Status::kLost;
  ChannelHeader ch{next_seq_++, recv_seq_.load(std::memory_order_acquire)};
  FrameHeader fh = make_header(op, flags, request_id, thread_id, payload);
  Status s = queue_frame(lk, ch, fh, parts, count);
  if (s == Status::kOk && flush) write_out(lk, false);
  return lost_ ? Status::kLost : s;
}

Status Channel::queue_frame(std::unique_lock<std::mutex>&, const ChannelHeader& ch, const FrameHeader& fh,
                            const iovec* parts, int count) {
  const size_t size = kChannelFrameHead + fh.length;
  if (blocks_.empty() || blocks_.back()->cap - blocks_.back()->used < size) {
    std::shared_ptr<Block> b;
    // The most recently freed spare that fits (warm in cache and in the page tables).
    for (size_t i = spare_.size(); i-- > 0;) {
      if (spare_[i]->cap < size) continue;
      b = std::move(spare_[i]);
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
      spare_bytes_ -= b->cap;
      b->used = b->written = 0;
      break;
    }
    if (!b) {
      b = std::make_shared<Block>();
      b->cap = std::max(kBlockBytes, size);
      b->data.reset(new uint8_t[b->cap]);
    }
    blocks_.push_back(std::move(b));
  }
  Block& b = *blocks_.back();
  uint8_t* p = b.data.get() + b.used;
  std::memcpy(p, &ch, sizeof ch);
  std::memcpy(p + sizeof ch, &fh, sizeof fh);
  p += kChannelFrameHead;
  for (int i = 0; i < count; ++i) {
    if (parts[i].iov_len) std::memcpy(p, parts[i].iov_base, parts[i].iov_len);
    p += parts[i].iov_len;
  }
  b.used += size;
  b.last_seq = ch.seq;
  replay_bytes_ += size;
  unflushed_ += size;
  stats_.replay_high_water = std::max<uint64_t>(stats_.replay_high_water, replay_bytes_);
  ++stats_.frames_sent;
  return Status::kOk;
}

Status Channel::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  if (lost_) return Status::kLost;
  if (!connected_ && side_ == Side::kClient && !reading_) {
    // Nobody else is about to repair it (a reader would): do it here, so one-way work queued by a
    // program that waits for nothing still reaches the server.
    reading_ = true;
    bool ok = repair(lk);
    release_reader(lk);
    if (!ok) return Status::kLost;
  }
  write_out(lk, false);
  return lost_ ? Status::kLost : Status::kOk;
}

void Channel::write_out(std::unique_lock<std::mutex>& lk, bool control_only) {
  if (writer_active_) {
    // The reading thread never waits for a writer: the active writer sends what it owes.
    if (control_only) return;
    cv_.wait(lk, [&] { return !writer_active_ || lost_; });
    if (lost_) return;
  }
  writer_active_ = true;
  std::vector<iovec> iov;
  // What a write reads from, kept alive until the transport is done with it (write_held: a TLS
  // stream encrypts bulk on a thread of its own after the write returns). A block held here is
  // not reused for new frames (trim_locked), nor are these control frames.
  struct Held {
    std::vector<std::shared_ptr<Block>> blocks;
    ChannelHeader control_ch[3];
    FrameHeader control_fh[3];
  };
  for (;;) {
    if (lost_ || !connected_) break;
    iov.clear();
    auto held = std::make_shared<Held>();
    std::vector<std::shared_ptr<Block>>& hold = held->blocks;
    // The channel's own frames first: they are unnumbered, so their place in the stream is free.
    ChannelHeader* control_ch = held->control_ch;
    FrameHeader* control_fh = held->control_fh;
    int n_control = 0;
    auto add_control = [&](uint16_t flags) {
      control_ch[n_control] = {0, recv_seq_.load(std::memory_order_acquire)};
      control_fh[n_control] = make_header(kOpHeartbeat, flags, static_cast<uint32_t>(stats_.heartbeats_sent), 0, 0);
      iov.push_back({&control_ch[n_control], sizeof(ChannelHeader)});
      iov.push_back({&control_fh[n_control], sizeof(FrameHeader)});
      ++n_control;
    };
    if (pong_owed_) {
      pong_owed_ = false;
      add_control(kReply);
    }
    bool ask = ping_owed_;
    ping_owed_ = false;
    if (!control_only && !ack_asked_ && replay_bytes_ >= std::min(kAskForAcksBytes, options_.replay_max_bytes / 4)) {
      ack_asked_ = true;
      ++stats_.heartbeats_sent;
      ask = true;
    }
    if (!control_only) {
      for (size_t i = first_unwritten_; i < blocks_.size(); ++i) {
        Block& b = *blocks_[i];
        if (b.written == b.used) continue;
        iov.push_back({b.data.get() + b.written, b.used - b.written});
        hold.push_back(blocks_[i]);
        b.written = b.used;
      }
      if (!blocks_.empty()) first_unwritten_ = blocks_.size() - 1;
      highest_written_ = next_seq_ - 1;
      unflushed_ = 0;
    }
    // A ping goes behind the frames of this write, so that the peer's answer acknowledges them:
    // ahead of a bulk reply's frames it was answered before they arrived, and the writer then
    // waited a heartbeat interval (5 s) for room once the replay buffer filled.
    if (ask) add_control(0);
    if (iov.empty()) break;
    auto t = transport_;
    uint64_t gen = gen_;
    lk.unlock();
    bool ok = t->write_held(iov.data(), static_cast<int>(iov.size()), std::move(held));
    lk.lock();
    if (!ok) {
      break_locked(gen, "sending failed (the connection closed or the network is down)");
      break;
    }
  }
  writer_active_ = false;
  cv_.notify_all();
}

void Channel::trim_locked() {
  while (!blocks_.empty() && blocks_.front()->last_seq <= peer_acked_ && blocks_.front()->written == blocks_.front()->used) {
    replay_bytes_ -= blocks_.front()->used;
    // Reused only when no write still holds it (use_count 1: the list's reference alone).
    if (blocks_.front().use_count() == 1 && spare_bytes_ + blocks_.front()->cap <= kSpareBytes) {
      spare_bytes_ += blocks_.front()->cap;
      spare_.push_back(std::move(blocks_.front()));
    }
    blocks_.pop_front();
    if (first_unwritten_ > 0) --first_unwritten_;
  }
  cv_.notify_all();
}

bool Channel::wait_for_room(std::unique_lock<std::mutex>& lk, size_t need) {
  // A frame larger than the whole bound still goes, alone: waiting could never end.
  auto full = [&] { return replay_bytes_ > 0 && replay_bytes_ + need > options_.replay_max_bytes; };
  if (lost_) return false;
  if (!full() && ack_asked_ && replay_bytes_ >= 2 * kAskForAcksBytes && !reading_ && connected_) {
    // Nobody reads, so the acknowledgement asked for sits unread: read what has arrived, at once.
    reading_ = true;
    lk.unlock();
    ReadWait w;
    w.deadline = Clock::now();
    w.quiet_since = w.deadline;
    w.return_on_control = true;
    Io r = next_data_frame(w);
    if (r == Io::kOk) {
      // A data frame has begun: its payload is read whole (a timeout mid-way would lose it).
      w.deadline = Clock::time_point::max();
      w.wait = Wait::kAwaiting;
      read_into_inbox(w);
    }
    lk.lock();
    release_reader(lk);
  }
  if (!full()) return true;
  ++stats_.ack_waits;
  ReadWait w;
  w.wait = Wait::kAwaiting;  // work is in flight: a silent peer must be noticed
  w.quiet_since = Clock::now();
  while (!lost_ && full()) {
    if (!ack_asked_) {
      // Ask for acknowledgements, behind everything queued (so they cover it).
      ack_asked_ = true;
      ping_owed_ = true;
      ++stats_.heartbeats_sent;
    }
    if (connected_) write_out(lk, false);
    if (lost_ || !full()) break;
    if (reading_) {
      // Someone reads: it handles the acknowledgements and wakes us.
      cv_.wait_for(lk, options_.heartbeat);
      continue;
    }
    reading_ = true;
    if (!connected_ && !repair(lk)) {
      release_reader(lk);
      return false;
    }
    lk.unlock();
    w.return_on_control = true;  // look at the bound again after every acknowledgement
    Io r = next_data_frame(w);
    if (r == Io::kOk) r = read_into_inbox(w);
    lk.lock();
    release_reader(lk);
  }
  return !lost_;
}

// ---- Receiving ----

bool Channel::take_reader(std::unique_lock<std::mutex>& lk, Clock::time_point deadline, bool* timed_out) {
  while (reading_ && !lost_) {
    if (deadline == Clock::time_point::max()) {
      cv_.wait(lk);
    } else if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && reading_) {
      *timed_out = true;
      return false;
    }
  }
  if (lost_) return false;
  reading_ = true;
  return true;
}

void Channel::release_reader(std::unique_lock<std::mutex>&) {
  reading_ = false;
  cv_.notify_all();
}

Status Channel::receive(FrameHeader* h, Wait wait, std::chrono::milliseconds timeout) {
  const auto deadline = timeout == kForever ? Clock::time_point::max() : Clock::now() + timeout;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    bool timed_out = false;
    if (!take_reader(lk, deadline, &timed_out)) return timed_out ? Status::kTimeout : Status::kLost;
    if (cur_.active) {
      lose_locked("receive() was called before the previous frame's payload was read (a bug in the endpoint)");
      return Status::kLost;
    }
    if (!inbox_.empty()) {
      Inbound in = std::move(inbox_.front());
      inbox_.pop_front();
      cur_ = Current{true, true, in.seq, in.h, 0, std::move(in.payload), wait};
      *h = cur_.h;
      if (h->length == 0) {
        cur_.active = false;
        release_reader(lk);
      }
      return Status::kOk;
    }
    if (!connected_ && !repair(lk)) {
      release_reader(lk);
      return Status::kLost;
    }
    lk.unlock();
    ReadWait w;
    w.wait = wait;
    w.deadline = deadline;
    w.quiet_since = Clock::now();
    Io r = next_data_frame(w);
    lk.lock();
    if (r == Io::kOk) {
      cur_.wait = wait;
      *h = cur_.h;
      if (h->length == 0) {
        recv_seq_.store(cur_.seq, std::memory_order_release);
        ++stats_.frames_received;
        cur_.active = false;
        release_reader(lk);
      }
      return Status::kOk;
    }
    release_reader(lk);
    if (r == Io::kTimeout) return Status::kTimeout;
    // Broken: the next turn repairs it (or finds the session lost).
  }
}

Status Channel::read_payload(void* dst, size_t n) {
  if (n == 0) return Status::kOk;
  if (!cur_.active || n > cur_.h.length - cur_.consumed) {
    std::lock_guard<std::mutex> lk(mu_);
    lose_locked("read_payload() past the end of the current frame (a bug in the endpoint)");
    return Status::kLost;
  }
  Status s = Status::kOk;
  if (cur_.from_inbox) {
    if (dst && n) std::memcpy(dst, cur_.inbox_payload.data() + cur_.consumed, n);
    cur_.consumed += n;
  } else {
    s = payload_bytes(dst, n);
  }
  if (s == Status::kOk && cur_.consumed < cur_.h.length) return Status::kOk;
  std::unique_lock<std::mutex> lk(mu_);
  if (s == Status::kOk && !cur_.from_inbox) {
    recv_seq_.store(cur_.seq, std::memory_order_release);
    ++stats_.frames_received;
  }
  cur_.active = false;
  cur_.inbox_payload = Bytes();
  release_reader(lk);
  return s;
}

Status Channel::receive_frame(FrameHeader* h, Bytes* payload, Wait wait, std::chrono::milliseconds timeout) {
  Status s = receive(h, wait, timeout);
  if (s != Status::kOk) return s;
  payload->resize(h->length);
  return h->length ? read_payload(payload->data(), h->length) : Status::kOk;
}

Status Channel::payload_bytes(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  ReadWait w;
  w.wait = cur_.wait;
  w.quiet_since = Clock::now();
  while (n) {
    size_t done = 0;
    Io r = read_raw(out, n, &done, w);
    cur_.consumed += done;
    if (out) out += done;
    n -= done;
    if (r == Io::kOk) break;
    // The connection broke in the middle of this frame: repair it, then find the frame again (the
    // peer resends it whole, from above what we said we received) and skip what we already have.
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (lost_ || (!connected_ && !repair(lk))) return Status::kLost;
      }
      const uint64_t want = cur_.seq;
      const FrameHeader want_h = cur_.h;
      const size_t have = cur_.consumed;
      w.return_on_control = false;
      Io f = next_data_frame(w);
      if (f != Io::kOk) continue;
      if (cur_.seq != want || std::memcmp(&cur_.h, &want_h, sizeof want_h) != 0) {
        std::lock_guard<std::mutex> lk(mu_);
        lose_locked(log::format("%s resent frame %llu differently after the resume", options_.peer.c_str(),
                                static_cast<unsigned long long>(want)));
        return Status::kLost;
      }
      // Whatever happens to the skip, the caller has `have` bytes of this frame.
      cur_.consumed = have;
      size_t skipped = 0;
      if (read_raw(nullptr, have, &skipped, w) == Io::kOk) break;
    }
  }
  return Status::kOk;
}

Channel::Io Channel::read_into_inbox(ReadWait& w) {
  Inbound in{cur_.seq, cur_.h, Bytes(cur_.h.length)};
  cur_.active = false;  // the frame is ours, not a receive()'s
  size_t done = 0;
  Io r = read_raw(in.payload.data(), in.payload.size(), &done, w);
  // A frame cut short is simply read again after the resume (it was not counted as received).
  if (r != Io::kOk) return r;
  std::lock_guard<std::mutex> lk(mu_);
  recv_seq_.store(in.seq, std::memory_order_release);
  ++stats_.frames_received;
  inbox_.push_back(std::move(in));
  cv_.notify_all();
  return Io::kOk;
}

Channel::Io Channel::read_more(uint8_t* dst, size_t cap, size_t* got, ReadWait& w) {
  for (;;) {
    std::shared_ptr<Transport> t;
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (lost_ || !connected_) return Io::kBroken;
      t = transport_;
      gen = gen_;
    }
    const bool checking = w.wait == Wait::kAwaiting;
    ssize_t r = Transport::kTimedOut;
    if ((checking || side_ == Side::kServer) && !w.spun) {
      // A reply is owed (or, on the server, the client's next call usually follows its reply
      // within microseconds): where it pays (common/spin_policy.h), look for it without sleeping
      // for a moment first; a frame that comes then costs no wake-up.
      w.spun = true;
      if (auto spin = spin_.before_wait(); spin.count() > 0) {
        const auto until = Clock::now() + spin;
        do {
          r = t->read_some(dst, cap, std::chrono::milliseconds(0));
        } while (r == Transport::kTimedOut && Clock::now() < until);
        spin_.after_spin(r != Transport::kTimedOut);
      }
    }
    // Partway through a frame (its header or its payload): it must be whole by frame_deadline_.
    if (!w.in_payload && rend_ == rbeg_) {
      frame_deadline_ = Clock::time_point::max();
    } else if (frame_deadline_ == Clock::time_point::max()) {
      frame_deadline_ = Clock::now() + options_.frame_time +
                        std::chrono::seconds(w.payload_left / std::max<uint64_t>(options_.frame_rate, 1));
    }
    if (r == Transport::kTimedOut) {
      Clock::time_point wake = std::min(w.deadline, frame_deadline_);
      if (checking) wake = std::min(wake, std::max(w.quiet_since, last_rx_) + options_.heartbeat * (w.pings + 1));
      auto timeout = kForever;
      if (wake != Clock::time_point::max()) {
        timeout = std::max(std::chrono::milliseconds(0),
                           std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()));
      }
      r = t->read_some(dst, cap, timeout);
    }
    if (r > 0) {
      *got = static_cast<size_t>(r);
      last_rx_ = Clock::now();
      w.pings = 0;
      return Io::kOk;
    }
    if (r != Transport::kTimedOut) {
      std::lock_guard<std::mutex> lk(mu_);
      break_locked(gen, "the connection closed");
      return Io::kBroken;
    }
    const auto now = Clock::now();
    if (now >= frame_deadline_) {
      frame_deadline_ = Clock::time_point::max();
      std::lock_guard<std::mutex> lk(mu_);
      break_locked(gen, log::format("a frame stopped partway (not whole within %.1f s of its start)",
                                    options_.frame_time.count() / 1000.0));
      return Io::kBroken;
    }
    if (now >= w.deadline) return Io::kTimeout;
    if (checking && now >= std::max(w.quiet_since, last_rx_) + options_.heartbeat * (w.pings + 1)) {
      if (w.pings + 1 >= options_.silent_heartbeats) {
        auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(options_.heartbeat * options_.silent_heartbeats);
        std::lock_guard<std::mutex> lk(mu_);
        break_locked(gen, log::format("no answer for %.1f s", silent.count() / 1000.0));
        return Io::kBroken;
      }
      ++w.pings;
      send_ping();
    }
  }
}

Channel::Io Channel::fill(size_t n, ReadWait& w) {
  if (rend_ - rbeg_ >= n) return Io::kOk;
  if (rbeg_ > 0) {
    std::memmove(rbuf_.get(), rbuf_.get() + rbeg_, rend_ - rbeg_);
    rend_ -= rbeg_;
    rbeg_ = 0;
  }
  while (rend_ < n) {
    size_t got = 0;
    Io r = read_more(rbuf_.get() + rend_, kReadBuffer - rend_, &got, w);
    if (r != Io::kOk) return r;
    rend_ += got;
  }
  return Io::kOk;
}

Channel::Io Channel::read_raw(void* dst, size_t n, size_t* done, ReadWait& w) {
  // Every read_raw reads a frame's payload (next_data_frame reads headers with fill).
  struct InPayload {
    ReadWait& w;
    bool was;
    InPayload(ReadWait& wait, size_t left) : w(wait), was(wait.in_payload) {
      w.in_payload = true;
      w.payload_left = left;
    }
    ~InPayload() { w.in_payload = was; }
  } in_payload(w, n);
  auto* out = static_cast<uint8_t*>(dst);
  *done = 0;
  while (*done < n) {
    if (rbeg_ == rend_) {
      size_t left = n - *done;
      if (out && left >= kReadBuffer / 2) {
        // Bulk payloads go straight to their destination.
        size_t got = 0;
        Io r = read_more(out + *done, left, &got, w);
        if (r != Io::kOk) return r;
        *done += got;
        continue;
      }
      rbeg_ = rend_ = 0;
      Io r = fill(1, w);
      if (r != Io::kOk) return r;
    }
    size_t take = std::min(n - *done, rend_ - rbeg_);
    if (out) std::memcpy(out + *done, rbuf_.get() + rbeg_, take);
    rbeg_ += take;
    *done += take;
  }
  return Io::kOk;
}

Channel::Io Channel::next_data_frame(ReadWait& w) {
  for (;;) {
    frame_deadline_ = Clock::time_point::max();  // a new frame: its clock starts when it stalls
    Io r = fill(kChannelFrameHead, w);
    if (r != Io::kOk) return r;
    ChannelHeader ch;
    FrameHeader fh;
    std::memcpy(&ch, rbuf_.get() + rbeg_, sizeof ch);
    std::memcpy(&fh, rbuf_.get() + rbeg_ + sizeof ch, sizeof fh);
    rbeg_ += kChannelFrameHead;
    const uint64_t received = recv_seq_.load(std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto malformed = [&](const std::string& what) {
        lose_locked(options_.peer + " sent a malformed channel frame: " + what);
        return Io::kBroken;
      };
      if (ch.ack > highest_written_) {
        return malformed(log::format("it acknowledged frame %llu, but only %llu were sent",
                                     static_cast<unsigned long long>(ch.ack),
                                     static_cast<unsigned long long>(highest_written_)));
      }
      if (ch.ack > peer_acked_) {
        peer_acked_ = ch.ack;
        ack_asked_ = false;
        trim_locked();
      }
      if (fh.length > options_.max_payload)
        return malformed(log::format("a frame of %u bytes is over the limit of %u", fh.length, options_.max_payload));
      if (!open_received_ && (ch.seq != 0 || fh.op != kOpChannelOpen))
        return malformed(log::format("its first frame was message %u, not the channel opening", fh.op));
      if (ch.seq == 0 && fh.op != kOpChannelOpen && fh.op != kOpHeartbeat)
        return malformed(log::format("message %u came without a sequence number", fh.op));
      if (ch.seq == 0 && fh.op == kOpHeartbeat && fh.length != 0)
        return malformed("a heartbeat with a payload");
      if (ch.seq == 0 && fh.op == kOpChannelOpen && (open_received_ || fh.length > kMaxHandshakePayload))
        return malformed("a second or oversized channel opening");
      if (ch.seq > received + 1) {
        return malformed(log::format("frame %llu came after frame %llu: frames are missing",
                                     static_cast<unsigned long long>(ch.seq), static_cast<unsigned long long>(received)));
      }
    }
    if (ch.seq == 0 && fh.op == kOpHeartbeat) {
      if (fh.flags & kReply) {
        // The answer to our ping: whatever it acknowledged, the question is answered, and a writer
        // short of room may ask again (otherwise it waited for the heartbeat timer).
        std::lock_guard<std::mutex> lk(mu_);
        ack_asked_ = false;
      } else {
        answer_ping();
      }
      if (w.return_on_control) return Io::kControl;
      continue;
    }
    if (ch.seq == 0) {
      // kOpChannelOpen: the peer's half of the session secret.
      std::vector<uint8_t> payload(fh.length);
      size_t done = 0;
      Io pr = read_raw(payload.data(), payload.size(), &done, w);
      if (pr != Io::kOk) return pr;
      Reader rd(payload.data(), payload.size());
      ChannelOpen open;
      crypto::Digest shared{};
      std::lock_guard<std::mutex> lk(mu_);
      if (!decode(rd, &open) || !crypto::x25519_shared(keys_.private_key, open.public_key, &shared)) {
        lose_locked(options_.peer + " sent a malformed channel opening (another rgpu release?)");
        return Io::kBroken;
      }
      const auto& client_key = side_ == Side::kClient ? keys_.public_key : open.public_key;
      const auto& server_key = side_ == Side::kClient ? open.public_key : keys_.public_key;
      Writer m;
      m.append("rgpu-session-secret", std::strlen("rgpu-session-secret"));
      m.append(shared.data(), shared.size());
      m.append(client_key.data(), client_key.size());
      m.append(server_key.data(), server_key.size());
      m.append(session_.data(), session_.size());
      secret_ = crypto::hmac_sha256(token_, m.buf().data(), m.size());
      have_secret_ = true;
      open_received_ = true;
      if (side_ == Side::kClient && options_.resume_window.count() == 0)
        options_.resume_window = std::chrono::seconds(open.resume_window_s);
      continue;
    }
    if (ch.seq <= received) {
      // Resent, and already had: read and drop.
      size_t done = 0;
      Io pr = read_raw(nullptr, fh.length, &done, w);
      if (pr != Io::kOk) return pr;
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.duplicates_dropped;
      if (w.return_on_control) return Io::kControl;
      continue;
    }
    cur_.active = true;
    cur_.from_inbox = false;
    cur_.seq = ch.seq;
    cur_.h = fh;
    cur_.consumed = 0;
    return Io::kOk;
  }
}

bool Channel::wait_acknowledged(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  uint64_t sent;
  {
    std::lock_guard<std::mutex> lk(mu_);
    sent = next_seq_ - 1;
    if (peer_acked_ >= sent) return true;
  }
  // The peer acknowledges what it has when it answers a ping; a ping that went out ahead of the
  // frame (the channel's own frames go first, and a resume resends the backlog behind them) is
  // answered too early, so the ping is repeated until the answer covers everything.
  constexpr auto kPingAgain = std::chrono::milliseconds(50);
  auto next_ping = Clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (peer_acked_ >= sent) return true;
      if (lost_) return false;
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (now >= next_ping) {
      send_ping();
      next_ping = now + kPingAgain;
    }
    // Short reads: the pong that carries the acknowledgement is taken inside receive(), which
    // goes on waiting for a data frame; coming back often notices it within a millisecond.
    FrameHeader h{};
    Status st = receive(&h, Wait::kPassive, std::chrono::milliseconds(1));
    if (st == Status::kLost) return false;
    if (st == Status::kOk && read_payload(nullptr, h.length) != Status::kOk) return false;
  }
}

void Channel::send_ping() {
  std::unique_lock<std::mutex> lk(mu_);
  ping_owed_ = true;
  ++stats_.heartbeats_sent;
  write_out(lk, true);
}

void Channel::answer_ping() {
  std::unique_lock<std::mutex> lk(mu_);
  pong_owed_ = true;
  write_out(lk, true);
}

// ---- Resume ----

bool Channel::repair(std::unique_lock<std::mutex>& lk) {
  if (lost_) return false;
  if (connected_) return true;
  if (resender_.joinable()) {
    // The last resume's backlog writer: it fails fast on the broken connection.
    lk.unlock();
    resender_.join();
    lk.lock();
    if (lost_) return false;
    if (connected_) return true;
  }
  rbeg_ = rend_ = 0;  // what was buffered belongs to the broken connection
  if (cur_.active && !cur_.from_inbox) {
    // The frame being read is resent whole; payload_bytes() skips what it already has.
  }
  auto window = options_.resume_window.count() ? options_.resume_window : std::chrono::milliseconds(60000);
  const auto deadline = std::min(broken_at_ + window, resume_until_);
  if (side_ == Side::kServer) {
    for (;;) {
      while (!pending_resume_ && !lost_ && !connected_) {
        if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !pending_resume_ && !connected_) {
          lose_locked(log::format("%s did not come back within %lld s of the connection breaking",
                                  options_.peer.c_str(),
                                  static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(window).count())));
          return false;
        }
      }
      if (lost_) return false;
      if (connected_) return true;
      auto t = std::move(pending_resume_);
      if (install(lk, std::move(t), pending_peer_received_, true)) return true;
      if (lost_) return false;
    }
  }
  if (!redial_) {
    lose_locked("the connection to " + options_.peer + " broke, and this side has no way to reconnect");
    return false;
  }
  if (!have_secret_) {
    lose_locked("the connection to " + options_.peer + " broke before the session was set up, so it cannot be resumed");
    return false;
  }
  if (Clock::now() >= resume_until_) {  // the server said the session ends by now
    lose_locked(resume_until_why_);
    return false;
  }
  for (;;) {
    bool final = false;
    if (client_resume(lk, deadline, &final)) return true;
    if (lost_) return false;
    if (Clock::now() >= resume_until_) {
      lose_locked(resume_until_why_);
      return false;
    }
    if (final || Clock::now() >= deadline) {
      lose_locked("could not resume the session with " + options_.peer + ": " + why_);
      return false;
    }
  }
}

bool Channel::client_resume(std::unique_lock<std::mutex>& lk, Clock::time_point deadline, bool* final) {
  const crypto::Digest secret = secret_;
  const uint64_t received = recv_seq_.load();
  Redial redial = redial_;
  lk.unlock();
  std::string err;
  std::unique_ptr<Transport> t = redial(deadline, &err);
  auto fail = [&](const std::string& why, bool is_final) {
    lk.lock();
    why_ = why;
    *final = is_final;
    return false;
  };
  if (!t) return fail(err, true);
  // Each step of the exchange may take up to the silence bound.
  auto step = [&] { return std::min(deadline, Clock::now() + options_.heartbeat * options_.silent_heartbeats); };
  const TlsBinding binding(*t);
  ResumeHello hello{session_, {}};
  crypto::random_bytes(hello.nonce.data(), hello.nonce.size());
  Writer w;
  encode(hello, &w);
  if (!write_plain(*t, kOpResume, w.buf())) return fail("the new connection closed at once", false);
  FrameHeader h{};
  std::vector<uint8_t> payload;
  if (!read_plain(*t, &h, &payload, step(), &err)) return fail("resuming: " + err, false);
  if (h.op == kOpRefused) return fail(options_.peer + " refused to resume: " + refused_reason(payload), true);
  ResumeChallenge challenge;
  Reader r(payload.data(), payload.size());
  if (h.op != kOpResumeChallenge || !decode(r, &challenge))
    return fail(log::format("%s answered the resume with message %u", options_.peer.c_str(), h.op), true);
  crypto::Digest expected =
      resume_proof(secret, "rgpu-resume-server", session_, hello.nonce, challenge.nonce, challenge.received, binding);
  if (!crypto::equal_constant_time(expected.data(), challenge.proof.data(), expected.size()))
    return fail(options_.peer + " did not prove it holds this session (its resume proof is wrong)", true);
  ResumeProof proof{
      resume_proof(secret, "rgpu-resume-client", session_, challenge.nonce, hello.nonce, received, binding), received};
  Writer pw;
  encode(proof, &pw);
  if (!write_plain(*t, kOpResumeProof, pw.buf())) return fail("the new connection closed during the resume", false);
  if (!read_plain(*t, &h, &payload, step(), &err)) return fail("resuming: " + err, false);
  if (h.op == kOpRefused) return fail(options_.peer + " refused to resume: " + refused_reason(payload), true);
  if (h.op != kOpResumed) return fail(log::format("%s ended the resume with message %u", options_.peer.c_str(), h.op), true);
  lk.lock();
  if (lost_) return false;
  if (!install(lk, std::shared_ptr<Transport>(std::move(t)), challenge.received, false)) {
    *final = lost_;
    return false;
  }
  return true;
}

bool Channel::accept_resume(std::unique_ptr<Transport> transport, const ResumeHello& hello, std::string* why) {
  std::shared_ptr<Transport> t(std::move(transport));
  const TlsBinding binding(*t);
  auto refuse = [&](const std::string& reason) {
    Writer w;
    w.put_str(reason);
    write_plain(*t, kOpRefused, w.buf());
    t->shutdown();
    *why = reason;
    return false;
  };
  crypto::Digest secret;
  uint64_t received;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ != Side::kServer) return refuse("this side does not accept resumes");
    if (lost_) return refuse("the session is over: " + why_);
    if (!have_secret_) return refuse("the session was never set up, so it cannot be resumed");
    secret = secret_;
    received = recv_seq_.load();
  }
  if (!crypto::equal_constant_time(hello.session.data(), session_.data(), session_.size()))
    return refuse("no such session");
  ResumeChallenge challenge;
  crypto::random_bytes(challenge.nonce.data(), challenge.nonce.size());
  challenge.received = received;
  challenge.proof =
      resume_proof(secret, "rgpu-resume-server", session_, hello.nonce, challenge.nonce, received, binding);
  Writer w;
  encode(challenge, &w);
  if (!write_plain(*t, kOpResumeChallenge, w.buf())) {
    *why = "the resuming connection closed at once";
    return false;
  }
  FrameHeader h{};
  std::vector<uint8_t> payload;
  std::string err;
  if (!read_plain(*t, &h, &payload, Clock::now() + options_.heartbeat * options_.silent_heartbeats, &err)) {
    *why = "the resuming client went away: " + err;
    t->shutdown();
    return false;
  }
  ResumeProof proof;
  Reader r(payload.data(), payload.size());
  if (h.op != kOpResumeProof || !decode(r, &proof)) return refuse("expected the resume proof");
  crypto::Digest expected =
      resume_proof(secret, "rgpu-resume-client", session_, challenge.nonce, hello.nonce, proof.received, binding);
  if (!crypto::equal_constant_time(expected.data(), proof.proof.data(), expected.size()))
    return refuse("the resume proof is wrong: this connection does not hold the session's secret");
  std::unique_lock<std::mutex> lk(mu_);
  if (lost_) return refuse("the session is over: " + why_);
  // The client moved: whatever the old connection still looks like, it is over.
  break_locked(gen_, "the client came back on a new connection");
  if (pending_resume_) pending_resume_->shutdown();
  pending_resume_ = t;
  pending_peer_received_ = proof.received;
  cv_.notify_all();
  if (!reading_) {
    // Nobody reads to pick it up: put it in place here.
    reading_ = true;
    repair(lk);
    release_reader(lk);
  }
  return true;
}

bool Channel::install(std::unique_lock<std::mutex>& lk, std::shared_ptr<Transport> t, uint64_t peer_received,
                      bool send_resumed) {
  if (peer_received < peer_acked_ || peer_received > highest_written_) {
    lose_locked(log::format("%s says it received %llu frames, but %llu were acknowledged and %llu sent",
                            options_.peer.c_str(), static_cast<unsigned long long>(peer_received),
                            static_cast<unsigned long long>(peer_acked_),
                            static_cast<unsigned long long>(highest_written_)));
    return false;
  }
  cv_.wait(lk, [&] { return !writer_active_ || lost_; });
  if (lost_) return false;
  writer_active_ = true;
  peer_acked_ = peer_received;
  trim_locked();
  // Everything above what the peer has is written again, in order, with its old numbers.
  for (auto& b : blocks_) b->written = 0;
  size_t skipped = 0;
  if (!blocks_.empty()) {
    Block& b = *blocks_.front();
    while (b.written < b.used) {
      ChannelHeader ch;
      FrameHeader fh;
      std::memcpy(&ch, b.data.get() + b.written, sizeof ch);
      std::memcpy(&fh, b.data.get() + b.written + sizeof ch, sizeof fh);
      if (ch.seq > peer_received) break;
      b.written += kChannelFrameHead + fh.length;
    }
    skipped = b.written;
  }
  first_unwritten_ = 0;
  unflushed_ = replay_bytes_ - skipped;
  bool ok = true;
  if (send_resumed) {
    lk.unlock();
    ok = write_plain(*t, kOpResumed, {});
    lk.lock();
  }
  if (!ok || lost_) {
    writer_active_ = false;
    cv_.notify_all();
    return false;
  }
  transport_ = std::move(t);
  ++gen_;
  connected_ = true;
  ++stats_.resumes;
  last_rx_ = Clock::now();
  if (options_.on_connection) options_.on_connection(true);
  writer_active_ = false;
  cv_.notify_all();
  log::info("resumed the session with %s (%zu bytes to resend)", options_.peer.c_str(), unflushed_);
  // The backlog goes out from a thread of its own: this one must go back to reading, or two peers
  // resending large backlogs at each other would both block writing.
  if (unflushed_ > 0) {
    resender_ = std::thread([this] {
      std::unique_lock<std::mutex> l(mu_);
      write_out(l, false);
    });
  }
  return true;
}

}  // namespace rgpu::proto
