// client/nccl/bridge.h, on the CUDA shim's side: an NCCL op is a Call like any driver call
// (client/call.h), so it is batched, ordered and routed as they are.
#include "client/nccl/bridge.h"

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"

#define RGPU_BRIDGE extern "C" __attribute__((visibility("default")))

RGPU_BRIDGE int rgpu_nccl_call(uint16_t op, int server, int oneway, uint64_t stream, const void* args,
                               size_t args_len, void* reply, size_t cap, size_t* reply_len) {
  using namespace rgpu::client;
  *reply_len = 0;
  if (!connection()) return no_connection_result();
  Call c(op, oneway ? kOneWay : kWaits);
  c.to_server(server >= 0 ? server : (several_servers() ? current_server() : 0));
  if (stream != ~uint64_t{0}) c.on_stream(handle_from<CUstream>(stream));
  c.args().append(args, args_len);
  const CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS || (oneway && batching())) return rc;
  const size_t n = c.reply().left();
  if (n > cap) return CUDA_ERROR_INVALID_VALUE;  // no NCCL reply is that long
  std::memcpy(reply, c.reply().view(n), n);
  *reply_len = n;
  return CUDA_SUCCESS;
}

RGPU_BRIDGE int rgpu_nccl_current_server(void) { return rgpu::client::current_server(); }
RGPU_BRIDGE int rgpu_nccl_handle_server(uint64_t id) { return rgpu::client::handle_server(id); }
RGPU_BRIDGE int rgpu_nccl_device_server(int client_ordinal) { return rgpu::client::device_server(client_ordinal); }
RGPU_BRIDGE int rgpu_nccl_server_device(int client_ordinal) { return rgpu::client::server_device(client_ordinal); }
RGPU_BRIDGE int rgpu_nccl_client_device(int server_ordinal, int server) {
  return rgpu::client::client_device(server_ordinal, server);
}
RGPU_BRIDGE int rgpu_nccl_servers(void) { return static_cast<int>(rgpu::client::connections().size()); }
