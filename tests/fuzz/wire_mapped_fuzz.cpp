// Fuzz target for protocol/wire/mapped.h: the server decodes the client's mapped- and
// managed-memory requests, the client decodes the server's updates and replies, so any bytes must
// decode or be refused without reading past the end. The first byte picks the message. What
// decodes must re-encode to bytes that decode and re-encode to the same bytes again.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/mapped.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k % 7) {
    case 0: {
      MappedAlloc m;
      if (!read_mapped_alloc(r, &m)) return false;
      put_mapped_alloc(*out, m);
      return true;
    }
    case 1: {
      MappedAllocReply m;
      if (!read_mapped_alloc_reply(r, &m)) return false;
      put_mapped_alloc_reply(*out, m);
      return true;
    }
    case 2: {
      ManagedAlloc m;
      if (!read_managed_alloc(r, &m)) return false;
      put_managed_alloc(*out, m);
      return true;
    }
    case 3: {
      uint64_t a;
      if (!read_managed_alloc_reply(r, &a)) return false;
      put_managed_alloc_reply(*out, a);
      return true;
    }
    case 4: {
      uint64_t a;
      if (!read_mapped_free(r, &a)) return false;
      put_mapped_free(*out, a);
      return true;
    }
    case 5: {
      MappedBytes m;
      if (!read_mapped_bytes(r, &m)) return false;
      if (r.left() != 0) abort();  // the bytes run to the end
      put_mapped_bytes(*out, m.address, m.offset, m.bytes, m.n);
      return true;
    }
    default: {
      MappedCopy m;
      if (!read_mapped_copy(r, &m)) return false;
      put_mapped_copy(*out, m);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer a, ar, m, mr, f, b, c;
  put_mapped_alloc(a, {0x7f0000000000, 4096, 2});
  seed(0, a);
  put_mapped_alloc_reply(ar, {0xd000, 0x7f0000000000});
  seed(1, ar);
  put_managed_alloc(m, {4096, 1});
  seed(2, m);
  put_managed_alloc_reply(mr, 0x600000000000);
  seed(3, mr);
  put_mapped_free(f, 0x7f0000000000);
  seed(4, f);
  put_mapped_bytes(b, 0x7f0000000000, 16, "bytes", 5);
  seed(5, b);
  put_mapped_copy(c, {300, 0xd000, 0, 0x7f0000000000, 64});
  seed(6, c);
}
