// Fuzz target for the channel (protocol/channel.h): every decoder it adds reads hostile bytes.
// The first input byte picks what is fed the rest:
//   0-3  the channel's decoders (ChannelOpen, ResumeHello, ResumeChallenge, ResumeProof): what
//        decodes must re-encode to the same bytes (tests/fuzz/wire_fuzz.h's round trip);
//   4    a server channel's receive path: the rest is the peer's whole stream after the
//        handshake (channel headers, frames, heartbeats, the opening), then end of stream;
//   5    the client side: the same stream, read while waiting for a reply (Wait::kAwaiting);
//   6    a server's resume exchange: a session with its secret set up, then the rest as a resuming
//        client's messages (kOpResume is read with read_resume_hello, then accept_resume);
//   7    a server's notice (kOpNotice, protocol/drain.h), which the client decodes: as 0-3;
//   8    a client's resume exchange: a session with its secret set up, a broken connection, then
//        the rest as what a hostile server answers the client's kOpResume with (client_resume:
//        kOpRefused, the challenge, kOpResumed), which must lose the session with a reason;
//   9    a client taking a server's notice (take_notice, protocol/drain.h): a draining one sets
//        the session's end (any number of seconds), an ended one closes the channel, and a
//        malformed one says so.
// Each run must end (no resume window, short heartbeats, end of stream at the latest) without a
// crash, and every lost session must say why.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "common/wire.h"
#include "protocol/channel.h"
#include "protocol/drain.h"
#include "protocol/frame.h"
#include "tests/fuzz/scripted_transport.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu;
using namespace rgpu::proto;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k) {
    case 0: {
      ChannelOpen m;
      if (!decode(r, &m)) return false;
      encode(m, out);
      return true;
    }
    case 1: {
      ResumeHello m;
      if (!decode(r, &m)) return false;
      encode(m, out);
      return true;
    }
    case 2: {
      ResumeChallenge m;
      if (!decode(r, &m)) return false;
      encode(m, out);
      return true;
    }
    case 3: {
      ResumeProof m;
      if (!decode(r, &m)) return false;
      encode(m, out);
      return true;
    }
    case 7: {
      Notice m;
      if (!decode(r, &m)) return false;
      if (m.text.size() > kMaxNoticeText) std::abort();
      encode(m, out);
      return true;
    }
    default:
      return false;
  }
}

ChannelOptions fuzz_options() {
  ChannelOptions o;
  o.heartbeat = std::chrono::milliseconds(5);
  o.silent_heartbeats = 2;
  o.resume_window = std::chrono::milliseconds(1);  // zero would mean the default (60 s)
  o.replay_max_bytes = 1 << 20;
  // No input holds a frame longer than this (libFuzzer's inputs are a few KiB), so a longer one is
  // cut short whatever its length: refusing it as over the limit is as good a test, and spares
  // a run the payload buffer its header asks for (up to kMaxPayload, 64 MiB: 30 ms under ASan).
  o.max_payload = 64 << 10;
  o.peer = "fuzz peer";
  return o;
}

void write_all(Transport& t, const uint8_t* data, size_t size) {
  iovec iov{const_cast<uint8_t*>(data), size};
  if (size) t.write(&iov, 1);
}

// Reads frames until the session ends; the stream's end (or anything malformed) must end it.
void drain(Channel& ch, Wait wait) {
  for (int i = 0; i < 100000; ++i) {
    FrameHeader h;
    Bytes payload;
    Status s = ch.receive_frame(&h, &payload, wait, std::chrono::milliseconds(200));
    if (s == Status::kLost) {
      if (ch.why().empty()) std::abort();  // every lost session says why
      return;
    }
    if (s == Status::kOk && payload.size() != h.length) std::abort();
  }
}

// Each side's key pair, made once: a fresh pair per channel is what a real session needs, and
// the same bytes decode the same way whatever the keys.
const crypto::KeyPair& server_keys() {
  static const crypto::KeyPair keys = crypto::x25519_keypair();
  return keys;
}
const crypto::KeyPair& client_keys() {
  static const crypto::KeyPair keys = crypto::x25519_keypair();
  return keys;
}

SessionId fixed_session() {
  SessionId id;
  std::memset(id.data(), 7, id.size());
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A channel about to wait may spin first where the machine has a core to spare, which a new
  // channel (one per input) finds out by reading /proc/stat: timing, not decoding, and a file read
  // per input. Never spin here.
  setenv("RGPU_SPIN", "0", 1);
  env::reload();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Every broken stream logs a warning; millions of runs would bury a crash's report in them.
  static const bool quiet = (log::set_level(log::kError), true);
  (void)quiet;
  if (size < 1) return 0;
  const uint8_t k = data[0];
  if (k < 4 || k == 7) return fuzz::wire_round_trip(data, size, decode_encode);
  ++data;
  --size;
  if (size > (1u << 20)) size = 1u << 20;
  if (k == 4 || k == 5) {
    auto [mine, peer] = memory_pair(4 << 20);
    Channel ch(k == 4 ? Side::kServer : Side::kClient, fixed_session(), "", fuzz_options(),
               k == 4 ? server_keys() : client_keys());
    // The stream ends in a break; a server would wait out the resume window for the client, the
    // same wait whatever the bytes were (channel_test covers it), so it ends at once here.
    if (k == 4) ch.end_on_break();
    ch.start(std::move(mine));
    write_all(*peer, data, size);
    peer->shutdown();
    drain(ch, k == 4 ? Wait::kPassive : Wait::kAwaiting);
    return 0;
  }
  if (k == 6) {
    // A server session that agreed its secret with a real client, then a hostile resume.
    auto [s_end, c_end] = memory_pair(1 << 20);
    ChannelOptions o = fuzz_options();
    o.resume_window = std::chrono::milliseconds(50);
    Channel server(Side::kServer, fixed_session(), "", o, server_keys());
    Channel client(Side::kClient, fixed_session(), "", o, client_keys());
    server.start(std::move(s_end));
    client.start(std::move(c_end));
    // Each side's opening is already buffered (start() writes it): a read takes it at once, and
    // finds no next frame without waiting for one.
    FrameHeader h;
    client.receive(&h, Wait::kPassive, std::chrono::milliseconds(0));
    server.receive(&h, Wait::kPassive, std::chrono::milliseconds(0));
    // The attacker's bytes as a connection that takes what the server writes (the challenge):
    // a pipe shut at the far end would fail that write, and the proof would never be read.
    std::unique_ptr<Transport> mine = std::make_unique<fuzz::ScriptedTransport>(data, size);
    ResumeHello hello;
    std::string why;
    if (read_resume_hello(*mine, &hello, &why, std::chrono::milliseconds(100))) {
      // Without the secret no proof can be right: the session must stay as it was.
      if (server.accept_resume(std::move(mine), hello, &why)) std::abort();
      if (why.empty() || server.lost()) std::abort();
    }
    return 0;
  }
  if (k == 9) {
    auto [mine, peer] = memory_pair(1 << 16);
    Channel ch(Side::kClient, fixed_session(), "", fuzz_options(), client_keys());
    ch.start(std::move(mine));
    std::string why;
    const NoticeAction a = take_notice(ch, data, size, &why);
    if (a == NoticeAction::kMalformed && why.empty()) std::abort();
    if (a == NoticeAction::kEnded && (why.empty() || !ch.lost())) std::abort();
    return 0;
  }
  if (k == 8) {
    auto [s_end, c_end] = memory_pair(1 << 20);
    ChannelOptions o = fuzz_options();
    // The exchange must start before the window ends (the scripted server answers at once).
    o.resume_window = std::chrono::milliseconds(500);
    Channel server(Side::kServer, fixed_session(), "", o, server_keys());
    Channel client(Side::kClient, fixed_session(), "", o, client_keys());
    server.start(std::move(s_end));
    client.start(std::move(c_end));
    // Each side's opening is already buffered (start() writes it): a read takes it at once, and
    // finds no next frame without waiting for one.
    FrameHeader h;
    client.receive(&h, Wait::kPassive, std::chrono::milliseconds(0));
    server.receive(&h, Wait::kPassive, std::chrono::milliseconds(0));
    int dials = 0;
    client.set_redial([&](Clock::time_point, std::string* err) -> std::unique_ptr<Transport> {
      if (dials++) {
        *err = "the fuzz server is gone";
        return nullptr;
      }
      return std::make_unique<fuzz::ScriptedTransport>(data, size);
    });
    client.break_connection("cut by the fuzz target");
    // Without the secret no server proof can be right: the session must end, saying why.
    if (client.flush() != Status::kLost || client.why().empty()) std::abort();
    return 0;
  }
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  fuzz::Seeds seed(out);
  {
    Writer w;
    encode(ChannelOpen{kChannelVersion, crypto::x25519_keypair().public_key, 600}, &w);
    seed(0, w);
  }
  {
    Writer w;
    encode(ResumeHello{fixed_session(), {}}, &w);
    seed(1, w);
  }
  {
    Writer w;
    encode(ResumeChallenge{}, &w);
    seed(2, w);
  }
  {
    Writer w;
    encode(ResumeProof{}, &w);
    seed(3, w);
  }
  // Streams: an opening, numbered frames (one resent), heartbeats both ways.
  Writer stream;
  auto add = [&](uint64_t seq, uint64_t ack, uint16_t op, uint16_t flags, const std::vector<uint8_t>& p) {
    ChannelHeader ch{seq, ack};
    FrameHeader fh = make_header(op, flags, static_cast<uint32_t>(seq), 0, p.size());
    stream.append(&ch, sizeof ch);
    stream.append(&fh, sizeof fh);
    stream.append(p.data(), p.size());
  };
  Writer open;
  encode(ChannelOpen{kChannelVersion, crypto::x25519_keypair().public_key, 600}, &open);
  add(0, 0, kOpChannelOpen, 0, open.buf());
  add(1, 0, 300, 0, {1, 2, 3});
  add(0, 0, kOpHeartbeat, 0, {});
  add(2, 0, 300, kNoReply, std::vector<uint8_t>(100, 9));
  add(2, 0, 300, kNoReply, std::vector<uint8_t>(100, 9));
  add(0, 0, kOpHeartbeat, kReply, {});
  add(3, 0, 300, 0, {});
  seed(4, stream);
  seed(5, stream);
  // A resume: kOpResume naming the session, then a (wrong) proof.
  Writer resume;
  Writer hello;
  encode(ResumeHello{fixed_session(), {}}, &hello);
  FrameHeader h1 = make_header(kOpResume, 0, 0, 0, hello.size());
  resume.append(&h1, sizeof h1);
  resume.append(hello.buf().data(), hello.size());
  Writer proof;
  encode(ResumeProof{{}, 0}, &proof);
  FrameHeader h2 = make_header(kOpResumeProof, 0, 0, 0, proof.size());
  resume.append(&h2, sizeof h2);
  resume.append(proof.buf().data(), proof.size());
  seed(6, resume);
  Writer notice;
  encode(Notice{kNoticeDraining, 60, "rgpu-server at 127.0.0.1:9713 is shutting down; 60 s to finish"}, &notice);
  seed(7, notice);
  seed(9, notice);
  Writer ended;
  encode(Notice{kNoticeEnded, 0, "rgpu-server at 127.0.0.1:9713 ended this session: it was stopped"}, &ended);
  seed(9, ended);
  // A hostile server's answers to a resume: a challenge (with a wrong proof), then kOpResumed;
  // and a refusal with its reason.
  Writer answers;
  Writer challenge;
  encode(ResumeChallenge{{}, {}, 3}, &challenge);
  FrameHeader h3 = make_header(kOpResumeChallenge, 0, 0, 0, challenge.size());
  answers.append(&h3, sizeof h3);
  answers.append(challenge.buf().data(), challenge.size());
  FrameHeader h4 = make_header(kOpResumed, 0, 0, 0, 0);
  answers.append(&h4, sizeof h4);
  seed(8, answers);
  Writer refused, reason;
  reason.put_str("no such session");
  FrameHeader h5 = make_header(kOpRefused, 0, 0, 0, reason.size());
  refused.append(&h5, sizeof h5);
  refused.append(reason.buf().data(), reason.size());
  seed(8, refused);
}
