// Copies on the wire (layout in copy.h).
#include "protocol/wire/copy.h"

namespace rgpu::proto::wire {

void put_htod_head(Writer& w, bool async, uint64_t dst, uint64_t stream, uint64_t n) {
  w.put_u64(dst);
  if (async) w.put_u64(stream);
  w.put_u64(n);
}

bool read_htod(Reader& r, bool async, HtoD* out) {
  out->dst = r.u64();
  out->stream = async ? r.u64() : 0;
  out->data = r.bytes(&out->n);
  return r.ok();
}

void put_dtoh(Writer& w, bool async, const DtoH& v) {
  w.put_u64(v.src);
  if (async) w.put_u64(v.stream);
  w.put_u64(v.n);
  if (async) w.put_u64(v.delivery);
}

bool read_dtoh(Reader& r, bool async, DtoH* out) {
  out->src = r.u64();
  out->stream = async ? r.u64() : 0;
  out->n = r.u64();
  out->delivery = async ? r.u64() : 0;
  if (!r.ok() || out->n > kMaxCopyBytes) return r.fail();  // a client of ours never asks for more than one frame
  return true;
}

namespace {

void put_side(Writer& w, const CopySide& s) {
  w.put_u32(s.kind);
  for (uint64_t v : {s.x, s.y, s.z, s.lod, s.value, s.pitch, s.height}) w.put_u64(v);
}

CopySide read_side(Reader& r) {
  CopySide s;
  s.kind = r.u32();
  s.x = r.u64(), s.y = r.u64(), s.z = r.u64(), s.lod = r.u64();
  s.value = r.u64(), s.pitch = r.u64(), s.height = r.u64();
  if (s.kind > CopySide::kArray) r.fail();
  return s;
}

}  // namespace

void put_pitched_copy_head(Writer& w, bool async, const PitchedCopy& c) {
  if (async) w.put_u64(c.stream);
  put_side(w, c.src);
  put_side(w, c.dst);
  w.put_u64(c.width);
  w.put_u64(c.height);
  w.put_u64(c.depth);
  if (c.src.kind == CopySide::kHost) w.put_u64(c.width * c.height * c.depth);
}

bool read_pitched_copy(Reader& r, bool async, bool three_d, PitchedCopy* out) {
  out->stream = async ? r.u64() : 0;
  out->src = read_side(r);
  out->dst = read_side(r);
  out->width = r.u64(), out->height = r.u64(), out->depth = r.u64();
  if (!r.ok()) return false;
  if (!three_d && out->depth != 1) return r.fail();
  const uint64_t w = out->width, h = out->height, d = out->depth;
  out->host_bytes = 0;
  out->data = nullptr;
  if (out->src.kind == CopySide::kHost || out->dst.kind == CopySide::kHost) {
    // Checked without overflow: every field is hostile.
    if (w == 0 || h == 0 || d == 0 || h > kMaxPayload / w || d > kMaxPayload / (w * h) || w * h * d > kMaxCopyBytes)
      return r.fail();
    out->host_bytes = w * h * d;
  }
  if (out->src.kind == CopySide::kHost) {
    size_t got = 0;
    out->data = r.bytes(&got);
    if (!r.ok() || got != out->host_bytes) return r.fail();
  }
  return true;
}

void put_peer_send(Writer& w, const PeerSend& v) {
  w.put_u64(v.copy);
  w.put_str(v.host);
  w.put<uint16_t>(v.port);
  w.append(v.ticket.data(), v.ticket.size());
  w.put_u64(v.src);
  w.put_u64(v.n);
  w.put_u8(v.has_stream);
  w.put_u64(v.stream);
  w.put_str(v.fingerprint);
}

bool read_peer_send(Reader& r, PeerSend* out) {
  out->copy = r.u64();
  out->host = r.str(255);
  out->port = r.get<uint16_t>();
  r.take(out->ticket.data(), out->ticket.size());
  out->src = r.u64();
  out->n = r.u64();
  out->has_stream = r.u8() != 0;
  out->stream = r.u64();
  out->fingerprint = r.str(80);
  return r.ok();
}

void put_peer_receive(Writer& w, const PeerReceive& v) {
  w.put_u64(v.copy);
  w.put_u64(v.dst);
  w.put_u64(v.n);
  w.put_u8(v.has_stream);
  w.put_u64(v.stream);
}

bool read_peer_receive(Reader& r, PeerReceive* out) {
  out->copy = r.u64();
  out->dst = r.u64();
  out->n = r.u64();
  out->has_stream = r.u8() != 0;
  out->stream = r.u64();
  return r.ok();
}

void put_peer_cancel(Writer& w, const PeerCancel& v) {
  w.put_u64(v.copy);
  w.put<int32_t>(v.result);
}

bool read_peer_cancel(Reader& r, PeerCancel* out) {
  out->copy = r.u64();
  out->result = r.i32();
  if (r.left() != 0) r.fail();  // nothing follows
  return r.ok();
}

}  // namespace rgpu::proto::wire
