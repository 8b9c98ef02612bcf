// Fuzz target for protocol/wire/copy.h: the server decodes every copy the client sends (the bulk
// bytes of host-to-device and pitched copies among them), the client decodes the async data
// frame's head, so any bytes must decode or be refused without reading past the end or taking a
// size over the limits. The first byte picks the message (bit 7: the async form; with 2, bit 6 the
// copies between servers, bit 5 which half, bit 4 without it the cancel). What decodes
// must re-encode to bytes that decode and re-encode to the same bytes again.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/copy.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  const bool async = k & 0x80;
  switch (k & 3) {
    case 0: {
      HtoD m;
      if (!read_htod(r, async, &m)) return false;
      put_htod_head(*out, async, m.dst, m.stream, m.n);
      out->append(m.data, m.n);
      return true;
    }
    case 1: {
      DtoH m;
      if (!read_dtoh(r, async, &m)) return false;
      if (m.n > kMaxCopyBytes) abort();
      put_dtoh(*out, async, m);
      return true;
    }
    case 2: {
      if (k & 0x40) {  // copies between servers
        if (k & 0x20) {
          PeerSend m;
          if (!read_peer_send(r, &m)) return false;
          put_peer_send(*out, m);
        } else if (k & 0x10) {
          PeerCancel m;
          if (!read_peer_cancel(r, &m)) return false;
          put_peer_cancel(*out, m);
        } else {
          PeerReceive m;
          if (!read_peer_receive(r, &m)) return false;
          put_peer_receive(*out, m);
        }
        return true;
      }
      uint64_t id;
      int32_t status;
      if (!read_async_data_head(r, &id, &status)) return false;
      uint8_t head[kAsyncDataHead];
      put_async_data_head(head, id, status);
      out->append(head, sizeof head);
      return true;
    }
    default: {
      const bool three_d = k & 0x40;
      PitchedCopy m;
      if (!read_pitched_copy(r, async, three_d, &m)) return false;
      if (m.host_bytes > kMaxCopyBytes || (m.src.kind == CopySide::kHost && !m.data)) abort();
      put_pitched_copy_head(*out, async, m);
      if (m.src.kind == CopySide::kHost) out->append(m.data, m.host_bytes);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer htod;
  put_htod_head(htod, true, 0x1000, 1, 8);
  htod.append("abcdefgh", 8);
  seed(0x80, htod);
  Writer dtoh;
  put_dtoh(dtoh, true, {0x1000, 1, 64, 2});
  seed(0x81, dtoh);
  Writer head;
  head.put_u64(5);
  head.put<int32_t>(0);
  seed(2, head);
  PitchedCopy c;
  c.src.kind = CopySide::kHost;
  c.dst.kind = CopySide::kArray;
  c.width = 4, c.height = 2, c.depth = 1;
  Writer pitched;
  put_pitched_copy_head(pitched, false, c);
  pitched.append("01234567", 8);
  seed(3, pitched);
  Writer three;
  c.src.kind = CopySide::kDevice;
  c.dst.kind = CopySide::kHost;
  c.depth = 2;
  put_pitched_copy_head(three, true, c);
  seed(0xc3, three);
  Writer send, receive, cancel;
  PeerSend ps;
  ps.copy = 7, ps.host = "10.0.0.2", ps.port = 40000, ps.src = 0x2000, ps.n = 4096;
  put_peer_send(send, ps);
  seed(0x62, send);
  put_peer_receive(receive, {7, 0x3000, 4096, true, 3});
  seed(0x42, receive);
  put_peer_cancel(cancel, {7, 217});
  seed(0x52, cancel);
}
