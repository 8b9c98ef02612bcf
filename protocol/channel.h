// The reliable channel every rgpu endpoint talks through once the handshake is done: frames
// (protocol/messages.h) delivered exactly once and in order across broken connections.
//
// What it adds to the frames (the wire is specified in messages.h, "The channel"):
// - a 16-byte ChannelHeader before every frame: the frame's sequence number in its direction and
//   the highest sequence number this side has received (an acknowledgement on every frame);
// - a replay buffer of the frames the peer has not acknowledged, at most
//   ChannelOptions::replay_max_bytes (RGPU_REPLAY_MAX_MB); a writer past it waits for
//   acknowledgements, asking for them with a heartbeat;
// - heartbeats (kOpHeartbeat): a side that waits for the peer (Wait::kAwaiting, or a writer waiting
//   for acknowledgements) pings after each heartbeat interval of silence, the peer answers at once
//   from its reading thread, and `silent_heartbeats` intervals without a byte mean the peer is gone
//   (the connection is then treated as broken);
// - resume: a broken connection is replaced by a new one on which the client proves it holds the
//   per-session secret (X25519 agreed in kOpChannelOpen, mixed with the token), both sides say
//   the last sequence number they received, each resends what the other lacks, and frames
//   that arrive twice are dropped by number. A frame half read when the connection broke is
//   continued where it stopped, so the caller never sees a break at all: its call returns later.
//   The client redials itself (set_redial); the server waits up to resume_window for its
//   listener to hand it the client's new connection (accept_resume).
//
// Threads. Any number of threads may send; one thread at a time reads (receive() and the
// read_payload() calls for its frame). A writer waiting for acknowledgements while nobody reads
// reads itself, keeping data frames for the next receive(). No thread of its own: a reply costs
// no thread switch. Socket writes are never made while holding the state lock, and the reading
// thread never waits for a writer (a heartbeat answer it cannot write at once is written by the
// writer that holds the socket), so two peers writing at each other cannot deadlock on it.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/spin_policy.h"
#include "common/wire.h"
#include "protocol/handshake.h"
#include "protocol/messages.h"
#include "protocol/transport.h"

namespace rgpu::proto {

struct ChannelOptions {
  // Unacknowledged bytes kept for a resume (RGPU_REPLAY_MAX_MB).
  size_t replay_max_bytes = 256u << 20;
  // Silence after which a waiting side pings (RGPU_HEARTBEAT).
  std::chrono::milliseconds heartbeat = std::chrono::seconds(5);
  // Heartbeat intervals of silence after which the peer is gone.
  int silent_heartbeats = 3;
  // How long a broken connection may take to come back before the session is lost. Client: how
  // long it redials (RGPU_RECONNECT; zero: the server's window, from its kOpChannelOpen). Server:
  // the session grace.
  std::chrono::milliseconds resume_window = std::chrono::seconds(600);
  uint32_t max_payload = kMaxPayload;
  // A frame begun must arrive whole within frame_time, plus a second for every frame_rate bytes of
  // its payload, from the moment its reader first waits for the rest; past it the connection is
  // called broken (and may resume): a peer that stops halfway through a frame cannot hold the
  // reader, whose side of the session otherwise waits forever (issue 17).
  std::chrono::milliseconds frame_time = std::chrono::seconds(10);
  uint64_t frame_rate = 1 << 20;
  // Names the peer in messages: "rgpu-server at 10.0.0.2:9713", "client alice@laptop pid=42".
  std::string peer = "peer";
  // Called when the connection breaks (false) and when a resume restores it (true), with the
  // channel's lock held: keep it short, and never call the channel from it (the server's session
  // list shows disconnected sessions through it).
  std::function<void(bool connected)> on_connection;

  // The defaults above with RGPU_REPLAY_MAX_MB, RGPU_HEARTBEAT and RGPU_RECONNECT applied.
  static ChannelOptions from_env();
};

// Which end of the session this side is: the client dials and proves, the server waits and checks.
enum class Side : uint8_t { kClient, kServer };

// How a read waits. kPassive: as long as it takes (a server waiting for the next call).
// kAwaiting: something is owed to us (a reply), so silence is checked with heartbeats.
enum class Wait : uint8_t { kPassive, kAwaiting };

enum class Status : uint8_t {
  kOk,
  kTimeout,  // receive() only: nothing arrived within its timeout
  kLost,     // the session is over (why() says why): resume failed or timed out, the peer sent
             // something malformed, or close() was called
};

// Counters for tests, stats and benchmarks.
struct ChannelStats {
  uint64_t frames_sent = 0, frames_received = 0;
  uint64_t duplicates_dropped = 0;
  uint64_t resumes = 0;
  uint64_t heartbeats_sent = 0;
  uint64_t replay_bytes = 0;       // now
  uint64_t replay_high_water = 0;  // most ever held
  uint64_t ack_waits = 0;          // times a writer waited for acknowledgements
};

// The first frame of a resuming connection (kOpResume), which the accepting side reads before it
// knows which session it is for.
struct ResumeHello {
  SessionId session{};
  std::array<uint8_t, 32> nonce{};
};

// A fresh connection to the same peer, for the client to resume on, dialled before `deadline`
// (with backoff: protocol/transport.h dial()). nullptr with *err when it gave up.
using Redial = std::function<std::unique_ptr<Transport>(Clock::time_point deadline, std::string* err)>;

class Channel {
 public:
  // `session` is the id from the handshake; `token` the shared token ("" for none), mixed into the
  // session secret so that resuming needs it too.
  Channel(Side side, const SessionId& session, std::string token, ChannelOptions options);
  // The same with this side's X25519 key pair given instead of made fresh. Only for tests that
  // make many channels (the fuzz target makes one or two per input, where the key generation was
  // a third of the time); every real session must have a fresh pair.
  Channel(Side side, const SessionId& session, std::string token, ChannelOptions options, const crypto::KeyPair& keys);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Takes the connection the handshake ran on and sends this side's kOpChannelOpen on it. The
  // peer's is read by the first read. False when the connection is already gone.
  bool start(std::shared_ptr<Transport> transport);
  // Client: how to get a new connection when this one breaks. Without one a break loses the session.
  void set_redial(Redial redial);

  // Queues one frame: header fields, payload = the concatenation of parts (copied into the
  // replay buffer, so the caller may reuse its memory at once). With flush, writes everything
  // queued (the frames before it go first). Waits while the replay buffer is full. A broken
  // connection is not an error here: the frame goes out after the resume.
  Status send(uint16_t op, uint16_t flags, uint32_t request_id, uint32_t thread_id, const iovec* parts, int count,
              bool flush);
  // Writes everything queued; repairs a broken connection first (client).
  Status flush();
  // Bytes queued and not yet written (the caller's batching decides when to flush).
  size_t unflushed() const;

  // Waits for the next frame from the peer and gives its header; its payload must then be read,
  // all of it, with read_payload before the next receive (the reading thread keeps the role until
  // then). Within `timeout` of nothing arriving, kTimeout.
  Status receive(FrameHeader* h, Wait wait, std::chrono::milliseconds timeout = kForever);
  // The next n bytes of the current frame's payload, into dst (nullptr: skipped).
  Status read_payload(void* dst, size_t n);
  // receive() and the whole payload.
  Status receive_frame(FrameHeader* h, Bytes* payload, Wait wait, std::chrono::milliseconds timeout = kForever);

  // Waits until the peer has acknowledged every frame sent so far (asking it to answer at once
  // with a ping), reading and dropping what arrives meanwhile: for a last frame whose loss would
  // go unnoticed (the client's goodbye), since a write into a connection that then broke
  // succeeds. A break meanwhile is repaired as by any read, and the resume's exchange says what
  // the peer received (the frame is resent if it was lost). False at `timeout`, or when the
  // session is lost. The caller must not be reading on another thread.
  bool wait_acknowledged(std::chrono::milliseconds timeout);

  // Server: a client's new connection whose kOpResume (hello) named this session. Runs the proof
  // exchange on it; with a right proof the connection replaces the current one (which is broken
  // off if it still looked alive) and true. Otherwise the client is sent kOpRefused, *why says why,
  // and the session is untouched.
  bool accept_resume(std::unique_ptr<Transport> transport, const ResumeHello& hello, std::string* why);

  // The peer said it is leaving (kOpGoodbye): from now on a broken connection ends the channel
  // (kLost) instead of waiting for a resume.
  void end_on_break();
  // Client: the server said the session ends at `until` (a draining server, protocol/drain.h): a
  // connection that breaks is redialled no later than that, and a break after it ends the channel
  // (kLost) with `why` instead of redialling a server that is gone.
  void resume_until(Clock::time_point until, const std::string& why);
  // Breaks the current connection as if the network had (tests, and a peer known to be gone).
  void break_connection(const std::string& why);
  // Ends the channel: blocked and later calls return kLost, nothing is repaired.
  void close(const std::string& why = "the channel was closed");

  bool lost() const;
  std::string why() const;
  ChannelStats stats() const;
  const SessionId& session() const { return session_; }

 private:
  struct Block;
  struct Inbound;
  enum class Io { kOk, kTimeout, kBroken, kControl };
  // How the current read waits (kept per read so heartbeats count from its start).
  struct ReadWait {
    Wait wait = Wait::kPassive;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point quiet_since{};
    int pings = 0;
    bool return_on_control = false;  // next_data_frame returns kControl after any other frame
    bool spun = false;               // this read spun once already (spin_)
    bool in_payload = false;         // a frame's payload is being read (read_raw)
    size_t payload_left = 0;         // and how much of it was left when it began
  };

  // All of these are called with mu_ held (lk) unless they say otherwise.
  Status queue_frame(std::unique_lock<std::mutex>& lk, const ChannelHeader& ch, const FrameHeader& fh,
                     const iovec* parts, int count);
  void write_out(std::unique_lock<std::mutex>& lk, bool control_only);
  void break_locked(uint64_t gen, const std::string& why);
  void lose_locked(const std::string& why);
  void trim_locked();
  bool wait_for_room(std::unique_lock<std::mutex>& lk, size_t need);
  // Takes the reading role (waiting for another reader to let go). False when lost.
  bool take_reader(std::unique_lock<std::mutex>& lk, Clock::time_point deadline, bool* timed_out);
  void release_reader(std::unique_lock<std::mutex>& lk);
  // Reader role held: puts a new connection in place after a break. False when the session is lost.
  bool repair(std::unique_lock<std::mutex>& lk);
  bool client_resume(std::unique_lock<std::mutex>& lk, Clock::time_point deadline, bool* final);
  bool install(std::unique_lock<std::mutex>& lk, std::shared_ptr<Transport> t, uint64_t peer_received,
               bool send_resumed);

  // Reader role held, mu_ not held.
  Io fill(size_t n, ReadWait& w);
  Io read_raw(void* dst, size_t n, size_t* done, ReadWait& w);
  Io read_more(uint8_t* dst, size_t cap, size_t* got, ReadWait& w);
  // Reads frames until a new data frame's header (in cur_); control frames are handled here.
  // kBroken also when the peer sent something malformed (lost_ is then set).
  Io next_data_frame(ReadWait& w);
  // The current frame's payload bytes, across resumes.
  Status payload_bytes(void* dst, size_t n);
  // The reader read a whole data frame for someone else: into the inbox.
  Io read_into_inbox(ReadWait& w);
  void answer_ping();
  void send_ping();

  const Side side_;
  const SessionId session_;
  const std::string token_;
  ChannelOptions options_;
  Redial redial_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // any change of state: acks, reader role, connection, writer role

  // The connection.
  std::shared_ptr<Transport> transport_;
  uint64_t gen_ = 0;  // bumped at each new connection, so a late failure of an old one is ignored
  bool connected_ = false;
  bool lost_ = false;
  bool end_on_break_ = false;
  Clock::time_point resume_until_ = Clock::time_point::max();  // resume_until
  std::string resume_until_why_;
  std::string why_;
  Clock::time_point broken_at_{};
  std::shared_ptr<Transport> pending_resume_;  // server: handed in by accept_resume
  uint64_t pending_peer_received_ = 0;
  std::thread resender_;  // writes the backlog after a resume (the reader must go on reading)

  // The session secret, from the two kOpChannelOpen frames.
  crypto::KeyPair keys_;
  bool have_secret_ = false;
  crypto::Digest secret_{};
  bool open_received_ = false;

  // Sending (mu_): the replay buffer is a list of blocks holding whole channel frames, oldest
  // first; frames past first_unwritten_/its `written` offset are queued and not yet written.
  std::deque<std::shared_ptr<Block>> blocks_;
  std::vector<std::shared_ptr<Block>> spare_;  // acknowledged blocks kept for reuse
  size_t spare_bytes_ = 0;
  size_t first_unwritten_ = 0;
  size_t replay_bytes_ = 0, unflushed_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t highest_written_ = 0;  // highest sequence number handed to a write (acks above it are hostile)
  uint64_t peer_acked_ = 0;
  bool writer_active_ = false;
  bool ping_owed_ = false, pong_owed_ = false;
  bool ack_asked_ = false;  // a ping asking for acknowledgements is out, no ack since

  // Receiving. recv_seq_ (highest frame fully received) is read by writers to stamp acks.
  std::atomic<uint64_t> recv_seq_{0};
  bool reading_ = false;
  std::deque<Inbound> inbox_;
  // Reader role only:
  // kReadBuffer bytes (channel.cpp), left uninitialised: only what was read into it is ever read.
  std::unique_ptr<uint8_t[]> rbuf_;
  size_t rbeg_ = 0, rend_ = 0;
  struct Current {
    bool active = false;
    bool from_inbox = false;
    uint64_t seq = 0;
    FrameHeader h{};
    size_t consumed = 0;
    Bytes inbox_payload;
    Wait wait = Wait::kPassive;
  } cur_;
  Clock::time_point last_rx_{};
  // When the frame being read must be whole (ChannelOptions::frame_time); max between frames.
  Clock::time_point frame_deadline_ = Clock::time_point::max();
  SpinPolicy spin_;  // how the reader waits for a reply, or on the server for the next call (reader role only)

  ChannelStats stats_;
};

// The channel's own wire messages, encoded and decoded here (every decoder checks bounds and is
// fuzzed by tests/fuzz/channel_fuzz.cpp). Layouts are in messages.h.
struct ChannelOpen {
  uint16_t version = kChannelVersion;
  std::array<uint8_t, 32> public_key{};
  uint32_t resume_window_s = 0;
};
struct ResumeChallenge {
  std::array<uint8_t, 32> nonce{};
  crypto::Digest proof{};
  uint64_t received = 0;
};
struct ResumeProof {
  crypto::Digest proof{};
  uint64_t received = 0;
};
void encode(const ChannelOpen& m, Writer* w);
void encode(const ResumeHello& m, Writer* w);
void encode(const ResumeChallenge& m, Writer* w);
void encode(const ResumeProof& m, Writer* w);
// Each takes a whole payload: false when it is short, long, or has fields out of range.
bool decode(Reader& r, ChannelOpen* m);
bool decode(Reader& r, ResumeHello* m);
bool decode(Reader& r, ResumeChallenge* m);
bool decode(Reader& r, ResumeProof* m);

// Reads the first frame of a connection an accepting side got, when it is a kOpResume (false and
// *why otherwise, or on a malformed one). Reads exactly that frame, nothing more.
bool read_resume_hello(Transport& t, ResumeHello* out, std::string* why,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace rgpu::proto
