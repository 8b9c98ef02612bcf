// serve() of opserver/session.h: one client's session on the reliable channel, frame by frame.
// Apart from session.cpp so that the fuzz target, which drives Session::handle alone, needs
// none of the channel.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "opserver/session.h"
#include "protocol/channel.h"
#include "protocol/drain.h"
#include "protocol/messages.h"

namespace rgpu::opserver {

using namespace rgpu::torchwire;

int serve(int fd, const SessionOptions& opt, const proto::ServerChannelSetup& setup) {
  c10::InferenceMode inference;  // no autograd bookkeeping on the server: the client does that
  Session session(opt);
  proto::SessionDoor door;
  std::unique_ptr<proto::Channel> ch = proto::start_server_channel(fd, setup, &door);
  if (!ch) return 1;
  // Detached from the drain before the channel goes (declared after it: destroyed first).
  struct DrainDetach {
    ~DrainDetach() { proto::drain_attach(nullptr); }
  } detach;
  proto::FrameHeader h{};
  Bytes payload;
  std::vector<Bytes> replies;
  bool said_goodbye = false;
  auto lost = [&] {
    // After the client's goodbye its connection's end is the session's end; otherwise it stayed
    // away past the grace (or broke the channel's rules).
    if (!said_goodbye) log::warn("the session ended: %s", ch->why().c_str());
    return said_goodbye ? 0 : 1;
  };
  PayloadTail tail;
  tail.read = [&ch](void* dst, size_t n, std::string* why) {
    if (ch->read_payload(dst, n) == proto::Status::kOk) return true;
    *why = ch->why();
    return false;
  };
  for (;;) {
    if (ch->receive(&h, proto::Wait::kPassive) != proto::Status::kOk) return lost();
    if (h.op == proto::kOpGoodbye) {
      // The client is leaving: calls it still makes from exit handlers are served.
      if (ch->read_payload(nullptr, h.length) != proto::Status::kOk) return lost();
      said_goodbye = true;
      ch->end_on_break();
      continue;
    }
    // Only a write's head is read here; its bytes go straight into the tensor (Session::handle).
    const size_t head = h.op == kTorchWrite ? std::min<size_t>(h.length, kWriteHeadBytes) : h.length;
    payload.resize(head);
    if (ch->read_payload(payload.data(), head) != proto::Status::kOk) return lost();
    tail.missing = h.length - head;
    replies.clear();
    std::string why;
    bool keep = session.handle(h.op, h.flags, payload.data(), payload.size(), &replies, &why, tail);
    bool sent = false;
    auto reply = [&](const uint8_t* p, size_t n, bool flush = false) {
      iovec part{const_cast<uint8_t*>(p), n};
      sent = true;
      return ch->send(h.op, proto::kReply, h.request_id, h.thread_id, &part, 1, flush) == proto::Status::kOk;
    };
    for (const Bytes& rep : replies) {
      if (!reply(rep.data(), rep.size())) return lost();
    }
    for (const Session::BulkPiece& b : session.bulk_reply()) {
      // Each chunk written as it is made (kReadChunk says why).
      for (size_t off = 0; off < b.n; off += kReadChunk) {
        if (!reply(b.p + off, std::min(kReadChunk, b.n - off), true)) return lost();
      }
    }
    if (sent && ch->flush() != proto::Status::kOk) return lost();
    if (!keep) {
      log::warn("closing the connection: %s", why.c_str());
      ch->close(why);
      return 1;
    }
  }
}

}  // namespace rgpu::opserver
