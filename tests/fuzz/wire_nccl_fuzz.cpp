// Fuzz target for protocol/wire/nccl.h (the NCCL API forwarded by rgpu's libnccl.so.2): the
// server decodes the requests, the client decodes the replies, so any bytes must decode or be
// refused without reading past the end or taking a count or name over the limits. The first byte
// picks the message.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/nccl.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k % 8) {
    case 0: {
      NcclReply m;
      if (!read_nccl_reply(r, &m)) return false;
      put_nccl_reply(*out, m);
      return true;
    }
    case 1: {
      NcclCommInit m;
      if (!read_nccl_comm_init(r, &m)) return false;
      put_nccl_comm_init(*out, m);
      return true;
    }
    case 2: {
      std::vector<int32_t> m;
      if (!read_nccl_devices(r, &m)) return false;
      if (m.empty() || m.size() > kMaxNcclDevices) abort();
      put_nccl_devices(*out, m);
      return true;
    }
    case 3: {
      std::vector<uint64_t> m;
      if (!read_nccl_comms(r, &m)) return false;
      if (m.size() > kMaxNcclDevices) abort();
      put_nccl_comms(*out, m);
      return true;
    }
    case 4: {
      NcclCommSplit m;
      if (!read_nccl_comm_split(r, &m)) return false;
      if (m.config.net_name.size() > kMaxNcclName || m.config.comm_name.size() > kMaxNcclName) abort();
      put_nccl_comm_split(*out, m);
      return true;
    }
    case 5: {
      NcclPreMulSum m;
      if (!read_nccl_premulsum(r, &m)) return false;
      put_nccl_premulsum(*out, m);
      return true;
    }
    case 6: {
      NcclCollective m;
      if (!read_nccl_collective(r, &m)) return false;
      put_nccl_collective(*out, m);
      return true;
    }
    default: {
      NcclConfig m;
      if (!read_nccl_config(r, &m)) return false;
      put_nccl_config(*out, m);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer reply, init, devices, comms, split, premul, coll, config;
  put_nccl_reply(reply, {5, 2, kNcclAllReduce, "the server's NCCL said no"});
  seed(0, reply);
  NcclCommInit i;
  i.nranks = 2;
  i.rank = 1;
  i.config.present = true;
  i.config.has_comm_name = true;
  i.config.comm_name = "pg";
  put_nccl_comm_init(init, i);
  seed(1, init);
  put_nccl_devices(devices, {0, 1});
  seed(2, devices);
  put_nccl_comms(comms, {0x1000, 0x2000});
  seed(3, comms);
  NcclCommSplit s;
  s.comm = 0x1000;
  s.color = 1;
  s.config.present = true;
  s.config.has_net_name = true;
  s.config.net_name = "Socket";
  put_nccl_comm_split(split, s);
  seed(4, split);
  put_nccl_premulsum(premul, {0x1000, 7, 1, 0x3f000000});
  seed(5, premul);
  put_nccl_collective(coll, {0x1000, 0x7e0000000000, 0x7e0000001000, 1001, 7, 0, -1, 2});
  seed(6, coll);
  put_nccl_config(config, i.config);
  seed(7, config);
}
