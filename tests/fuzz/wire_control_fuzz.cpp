// Fuzz target for protocol/wire/control.h and protocol/wire/dark_api.h (allocations ahead,
// host-callback frames, the session list and session control, the export-table ops): the server decodes the
// requests, the client decodes the replies and the callback frames, so any bytes must decode or
// be refused without reading past the end or taking a count over the limits. The first byte
// picks the message.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"
#include "protocol/wire/dark_api.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k % 17) {
    case 0: {
      AllocAhead m;
      if (!read_alloc_ahead(r, &m)) return false;
      put_alloc_ahead(*out, m);
      return true;
    }
    case 1: {
      uint64_t first;
      std::vector<uint64_t> more;
      if (!read_alloc_ahead_reply(r, &first, &more)) return false;
      if (more.size() > rgpu::proto::kMaxAllocAhead) abort();
      put_alloc_ahead_reply(*out, first, more);
      return true;
    }
    case 2: {
      AllocSizes m;
      if (!read_alloc_many(r, &m)) return false;
      put_alloc_many(*out, m);
      return true;
    }
    case 3: {
      std::vector<std::vector<uint64_t>> m;
      if (!read_alloc_many_reply(r, &m)) return false;
      size_t total = 0;
      for (const auto& made : m) total += made.size();
      if (m.size() > rgpu::proto::kMaxAllocMany || total > rgpu::proto::kMaxAllocManyCount) abort();
      put_alloc_many_reply(*out, m);
      return true;
    }
    case 4: {
      Callback m;
      if (!read_callback(r, &m)) return false;
      put_callback(*out, m);
      return true;
    }
    case 5: {
      uint64_t id;
      if (!read_callback_done(r, &id)) return false;
      put_callback_done(*out, id);
      return true;
    }
    case 6: {
      std::vector<SessionEntry> m;
      if (!read_sessions(r, &m)) return false;
      if (m.size() > kMaxSessions) abort();
      put_sessions(*out, m);
      return true;
    }
    case 7: {
      ToolsContextAsk m;
      if (!read_tools_context_ask(r, &m)) return false;  // without the stream it re-encodes with 0
      put_tools_context_ask(*out, m);
      return true;
    }
    case 8: {
      ToolsContextValue m;
      if (!read_tools_context_value(r, &m)) return false;
      put_tools_context_value(*out, m);
      return true;
    }
    case 9: {
      ModuleFunctionsAsk m;
      if (!read_module_functions_ask(r, &m)) return false;
      put_module_functions_ask(*out, m);
      return true;
    }
    case 10: {
      std::vector<std::string> m;
      if (!read_function_names(r, &m)) return false;
      put_function_names(*out, m);
      return true;
    }
    case 11: {
      uint64_t ctx;
      if (!read_context_ask(r, &ctx)) return false;
      put_context_ask(*out, ctx);
      return true;
    }
    case 12: {
      std::vector<uint8_t> m;
      if (!read_cluster_topology(r, &m)) return false;
      if (m.size() > rgpu::proto::kMaxClusterTopology) abort();
      put_cluster_topology(*out, m.data(), static_cast<uint32_t>(m.size()));
      return true;
    }
    case 13: {
      CUuuid id;
      if (!read_export_table_ask(r, &id)) return false;
      put_export_table_ask(*out, id);
      return true;
    }
    case 14: {
      uint64_t first;
      if (!read_export_table_word(r, &first)) return false;
      put_export_table_word(*out, first);
      return true;
    }
    case 15: {
      SessionControl m;
      if (!read_session_control(r, &m)) return false;
      put_session_control(*out, m);
      return true;
    }
    default: {
      SessionControlReply m;
      if (!read_session_control_reply(r, &m)) return false;
      if (m.message.size() > rgpu::proto::kMaxSessionControlMessage) abort();
      put_session_control_reply(*out, m);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer ahead, ahead_reply, many, many_reply, cb, done, sessions;
  put_alloc_ahead(ahead, {4096, 3});
  seed(0, ahead);
  put_alloc_ahead_reply(ahead_reply, 0xd000, {0xe000});
  seed(1, ahead_reply);
  put_alloc_many(many, {{512, 2}, {4096, 1}});
  seed(2, many);
  put_alloc_many_reply(many_reply, {{0xa000, 0xa200}, {}});
  seed(3, many_reply);
  put_callback(cb, {5, 0, 1});
  seed(4, cb);
  put_callback_done(done, 5);
  seed(5, done);
  put_sessions(sessions, {{12, "alice@host", "127.0.0.1:5", 1700000000, true}});
  seed(6, sessions);
  Writer ctx_ask, ctx_value, fn_ask, names, topo_ask, topo, table_ask, table_word;
  put_tools_context_ask(ctx_ask, {0x1001, 2});
  seed(7, ctx_ask);
  put_tools_context_value(ctx_value, {0, 42});
  seed(8, ctx_value);
  put_module_functions_ask(fn_ask, {0, 0x2000});
  seed(9, fn_ask);
  put_function_names(names, {"kernel_a", "kernel_b"});
  seed(10, names);
  put_context_ask(topo_ask, 0x1001);
  seed(11, topo_ask);
  const uint8_t bytes[3] = {4, 4, 3};
  put_cluster_topology(topo, bytes, 3);
  seed(12, topo);
  put_export_table_ask(table_ask, CUuuid{});
  seed(13, table_ask);
  put_export_table_word(table_word, 0x1f8);
  seed(14, table_word);
  Writer control, control_reply;
  put_session_control(control, {rgpu::proto::kSessionMigrate, 1234, 1});
  seed(15, control);
  put_session_control_reply(control_reply, {"session 1234 is not suspended", CU_PROCESS_STATE_RUNNING});
  seed(16, control_reply);
}
