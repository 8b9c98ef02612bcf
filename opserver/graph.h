// Compiled graphs (torch.compile(backend="rgpu"), protocol/torch_wire.h kTorchGraph and
// kTorchGraphRun): an aten-level FX graph the client serialized, kept by the session and run as
// one call through the dispatcher. Session::graph_define and Session::graph_run (graph.cpp) are
// the session's members; this header holds what they keep.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "opserver/argument.h"
#include "protocol/torch_wire.h"

namespace rgpu::opserver {

// The graph's bytes do not decode: session.cpp turns it into its own Malformed (the connection
// closes).
struct GraphMalformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What kTorchCall refuses too (session.cpp): operators outside aten, and the denied ones.
bool op_refused(const std::string& name);

// A graph argument: a constant, a list, or a reference to an input or an earlier node's result.
struct GraphValue : ArgumentValue<GraphValue> {
  uint32_t node = 0, ret = 0;  // kGraphInput: node is the input index
  int32_t elem = -1;
};

struct GraphNode {
  std::optional<c10::OperatorHandle> op;
  std::string name, overload;
  std::string full;  // "aten::mm.default", for errors
  std::vector<GraphValue> args;
  uint32_t last_use = 0;  // the last node (or nnodes for the outputs) that reads this one
};

class InductorProgram;  // opserver/inductor.h

struct Graph {
  uint32_t ninputs = 0;
  std::vector<GraphNode> nodes;
  std::vector<GraphValue> outputs;

  // How its runs go (Session::graph_run), decided at the first: compiled by Inductor, or op by op
  // for good (--compile none, no Python, Inductor refused it; said once in the log).
  enum class Mode : uint8_t { kUndecided, kInductor, kOpByOp } mode = Mode::kUndecided;
  std::shared_ptr<InductorProgram> program;
  // What Inductor's code was generated for: each input's kind, dtype, device, sizes, strides,
  // storage offset and size, alignment and aliasing (input_signature in graph.cpp). A run whose
  // inputs differ runs op by op: the generated code indexes its inputs as they were.
  std::vector<int64_t> signature;
  bool told_other_inputs = false;  // logged once that a run's inputs differ
  // For the session's summary in the log (Session::log_graph_summary): runs each way, the host's
  // time in them (the device may still be running), results copied into the storage the client
  // minted (another layout than it recorded, or a view of a storage the session holds already).
  uint64_t inductor_runs = 0, op_runs = 0, copied_results = 0;
  double run_seconds = 0;
};

}  // namespace rgpu::opserver
