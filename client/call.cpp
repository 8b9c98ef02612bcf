// One call's way to the server and back (client/call.h): a one-way call is queued on the
// connection and its failure comes back with a later reply; a waiting call is sent, its reply
// read, and an error deferred from an earlier one-way call on this thread is reported with it
// (protocol/messages.h, ReplyPrefix). The process-wide state it uses (the connection, thread ids,
// tracing) is client/runtime.h's.
#include "client/call.h"

#include <chrono>
#include <utility>

#include "client/device_work.h"
#include "client/driver/host_memory.h"
#include "client/mapped_memory.h"
#include "client/runtime.h"
#include "client/stats.h"
#include "common/log.h"
#include "gen/ops.gen.h"

namespace rgpu::client {

Call::Call(uint16_t op, CallKind kind) : op_(op), kind_(kind) {}

Connection* Call::route() {
  if (!several_servers()) return connection();
  if (other_ >= 0) {
    Connection* a = connection(server_);
    Connection* b = connection(other_);
    log::error("%s names handles of two servers (%s and %s); a call acts on one server's GPUs, so rgpu refuses it "
               "(returning CUDA_ERROR_NOT_SUPPORTED): keep the handles a call names on one server",
               op::name(op_) ? op::name(op_) : "a call", a ? a->server_name().c_str() : "?",
               b ? b->server_name().c_str() : "?");
    return nullptr;
  }
  return connection(server());
}

uint64_t Call::mint() {
  const uint64_t id = mint_handle();
  return several_servers() ? id | (static_cast<uint64_t>(server()) << proto::kHandleServerShift) : id;
}

CUresult Call::invoke() {
  if (kind_ == kOneWay && batching()) {
    Connection* conn = route();
    if (!conn) return several_servers() && connection() ? CUDA_ERROR_NOT_SUPPORTED : no_connection_result();
    device_work::note(op_, stream_);
    if (!checked_) device_work::unanswered();
    if (mapped::active()) mapped::push(*conn, thread_id(), op_);
    if (!conn->send_oneway(op_, thread_id(), args_buf_.data(), args_buf_.size(), attach_, attach_len_))
      return CUDA_ERROR_DEVICE_UNAVAILABLE;
    count_call(op_, false);
    return CUDA_SUCCESS;
  }
  CUresult rc = submit();
  return rc == CUDA_SUCCESS ? finish() : rc;
}

CUresult Call::submit() {
  Connection* conn = route();
  if (!conn) return several_servers() && connection() ? CUDA_ERROR_NOT_SUPPORTED : no_connection_result();
  device_work::note(op_, stream_);
  if (mapped::active()) mapped::push(*conn, thread_id(), op_);
  slot_.sink = sink_;
  slot_.sink_prefix = sink_ ? sizeof(proto::ReplyPrefix) + sink_prefix_ : 0;
  slot_.sink_cap = sink_cap_;
  id_ = conn->submit(op_, thread_id(), args_buf_.data(), args_buf_.size(), attach_, attach_len_, &slot_);
  return id_ ? CUDA_SUCCESS : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

CUresult Call::finish() {
  Connection* conn = several_servers() ? connection(server()) : connection();
  if (!conn || !id_) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  const bool counting = stats::enabled();
  std::chrono::steady_clock::time_point t0;
  if (counting) t0 = std::chrono::steady_clock::now();
  bool ok = conn->wait(id_, &slot_);
  device_work::answered();  // the reply brings this thread's deferred errors
  if (counting) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    count_call(op_, true, static_cast<uint64_t>(us));
  }
  if (!ok) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  reply_buf_ = std::move(slot_.payload);
  sink_received_ = slot_.sink_got;
  Reader r(reply_buf_.data(), reply_buf_.size());
  proto::ReplyPrefix prefix = r.get<proto::ReplyPrefix>();
  int32_t own = r.get<int32_t>();
  if (!r.ok()) {
    log::error("rgpu-server sent a truncated reply to %s", op::name(op_) ? op::name(op_) : "a control message");
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  reply_reader_ = r;
  deferred_ = static_cast<CUresult>(prefix.deferred_result);
  if (prefix.deferred_result != CUDA_SUCCESS) {
    const char* failed = op::name(prefix.deferred_op);
    log::debug("an earlier one-way call %s failed with error %d; reporting it now", failed ? failed : "?",
               prefix.deferred_result);
    trace_result(prefix.deferred_op, static_cast<CUresult>(prefix.deferred_result), true);
    if (own == CUDA_SUCCESS) {
      if (prefix.deferred_result == CUDA_ERROR_ILLEGAL_ADDRESS) explain_illegal_address();
      return static_cast<CUresult>(prefix.deferred_result);
    }
  }
  if (own != CUDA_SUCCESS) trace_result(op_, static_cast<CUresult>(own), false);
  if (own == CUDA_ERROR_ILLEGAL_ADDRESS || prefix.deferred_result == CUDA_ERROR_ILLEGAL_ADDRESS) explain_illegal_address();
  return static_cast<CUresult>(own);
}

}  // namespace rgpu::client
