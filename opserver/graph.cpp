// Compiled graphs (opserver/graph.h, protocol/torch_wire.h kTorchGraph, kTorchGraphRun): decoding
// a graph once, checking every reference and operator; at its first run, compiling it with
// Inductor (opserver/inductor.h) where the server does; then each run either calls Inductor's
// code or runs the graph node by node through the dispatcher, each node's arguments built
// against its schema from constants, the run's inputs and earlier results. Either way the results
// are bound to the storage ids the client minted, in the layouts it recorded.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "opserver/session.h"

namespace rgpu::opserver {

using namespace rgpu::torchwire;

namespace {

// A graph value; refs are checked against what precedes them (inputs, nodes before `node`).
GraphValue decode_graph_value(Reader& r, int depth, uint32_t ninputs, uint32_t node) {
  return decode_argument<GraphMalformed, GraphValue>(r, depth, "truncated graph value", [&](Reader& r, GraphValue* v, int) {
    switch (v->tag) {
      case kGraphInput:
        v->node = r.u32();
        if (r.ok() && v->node >= ninputs) throw GraphMalformed("a graph references an input it does not have");
        break;
      case kGraphNode:
        v->node = r.u32();
        v->ret = r.u32();
        v->elem = r.get<int32_t>();
        if (r.ok() && v->node >= node) throw GraphMalformed("a graph node references a node that does not precede it");
        if (r.ok() && v->elem < -1) throw GraphMalformed("a negative list element in a graph reference");
        break;
      default:
        throw GraphMalformed(log::format("value tag %u is not allowed in a compiled graph", v->tag));
    }
  });
}

void note_uses(const GraphValue& v, std::vector<GraphNode>& nodes, uint32_t user) {
  if (v.tag == kGraphNode) nodes[v.node].last_use = std::max(nodes[v.node].last_use, user);
  for (const GraphValue& e : v.list) note_uses(e, nodes, user);
}

const char* graph_tag_name(Tag t) {
  switch (t) {
    case kNone: return "None";
    case kBool: return "bool";
    case kInt: return "int";
    case kDouble: return "float";
    case kComplex: return "complex";
    case kString: return "str";
    case kDevice: return "device";
    case kList: return "list";
    case kGraphInput: case kGraphNode: return "a graph value";
    default: return "?";
  }
}

}  // namespace

void Session::graph_define(Reader& r) {
  uint64_t id = r.u64();
  uint32_t ninputs = r.u32();
  uint32_t nnodes = r.u32();
  if (!r.ok()) throw GraphMalformed("truncated graph");
  if (nnodes > kMaxGraphNodes || nnodes > r.left() || ninputs > r.left()) throw GraphMalformed("a graph longer than its message");
  Graph g;
  g.ninputs = ninputs;
  g.nodes.resize(nnodes);
  for (uint32_t k = 0; k < nnodes; ++k) {
    GraphNode& n = g.nodes[k];
    std::string name = r.str(kMaxNameString);
    std::string overload = r.str(kMaxNameString);
    uint32_t nargs = r.u32();
    if (!r.ok() || nargs > r.left()) throw GraphMalformed("truncated graph node");
    n.name = std::move(name);
    n.overload = std::move(overload);
    n.full = n.overload.empty() ? n.name : n.name + "." + n.overload;
    n.args.reserve(nargs);
    for (uint32_t a = 0; a < nargs; ++a) n.args.push_back(decode_graph_value(r, 0, ninputs, k));
    n.last_use = k;
  }
  uint32_t nout = r.u32();
  if (!r.ok() || nout > r.left()) throw GraphMalformed("truncated graph outputs");
  for (uint32_t k = 0; k < nout; ++k) g.outputs.push_back(decode_graph_value(r, 0, ninputs, nnodes));
  if (!r.ok() || r.left() != 0) throw GraphMalformed("a graph with trailing or missing bytes");

  // The bytes decoded; what follows is the client's mistake, reported (deferred).
  for (uint32_t k = 0; k < nnodes; ++k) {
    GraphNode& n = g.nodes[k];
    if (op_refused(n.name)) throw std::runtime_error("operator " + n.full + " is not one rgpu-opserver runs for clients");
    auto handle = c10::Dispatcher::singleton().findSchema({n.name, n.overload});
    if (!handle)
      throw std::runtime_error("operator " + n.full + " does not exist in this server's torch " + torch_version());
    if (handle->schema().arguments().size() != n.args.size())
      throw std::runtime_error(log::format("%s takes %zu arguments, the graph gives it %zu", n.full.c_str(),
                                          handle->schema().arguments().size(), n.args.size()));
    n.op = *handle;
    for (const GraphValue& a : n.args) note_uses(a, g.nodes, k);
  }
  for (const GraphValue& o : g.outputs) note_uses(o, g.nodes, nnodes);
  if (graphs_.count(id)) throw std::runtime_error(log::format("graph id %llu is already in use", (unsigned long long)id));
  if (graphs_.size() >= kMaxGraphs) throw std::runtime_error("too many compiled graphs on this connection");
  if (log::level() >= log::kDebug) log::debug("compiled graph %llu: %u inputs, %u nodes", (unsigned long long)id, ninputs, nnodes);
  graphs_.emplace(id, std::move(g));
}

namespace {

c10::IValue graph_ref(const GraphValue& v, const std::vector<c10::IValue>& inputs,
                      const std::vector<torch::jit::Stack>& results, const std::string& where) {
  if (v.tag == kGraphInput) return inputs[v.node];
  const torch::jit::Stack& st = results[v.node];
  if (st.empty()) throw std::runtime_error(where + ": reads a node result the server already released");
  if (v.ret >= st.size()) throw std::runtime_error(where + ": reads a result its node does not return");
  if (v.elem < 0) return st[v.ret];
  if (!st[v.ret].isList()) throw std::runtime_error(where + ": reads an element of a result that is not a list");
  auto l = st[v.ret].toListRef();
  if (static_cast<size_t>(v.elem) >= l.size()) throw std::runtime_error(where + ": reads past the end of a returned list");
  return l[v.elem];
}

}  // namespace

c10::IValue Session::graph_arg(const GraphValue& v, const c10::TypePtr& type, const std::vector<c10::IValue>& inputs,
                               const std::vector<torch::jit::Stack>& results, const std::string& where) {
  if (v.tag == kGraphInput || v.tag == kGraphNode) {
    c10::IValue x = graph_ref(v, inputs, results, where);
    c10::TypePtr t = type;
    bool optional = false;
    if (t->kind() == c10::TypeKind::OptionalType) {
      optional = true;
      t = t->castRaw<c10::OptionalType>()->getElementType();
    }
    bool want_tensor = t->kind() == c10::TypeKind::TensorType;
    if (!(optional && x.isNone()) && want_tensor != x.isTensor() && t->kind() != c10::TypeKind::ListType)
      throw std::runtime_error(where + ": expected " + type->str() + ", the graph gives a " + x.tagKind());
    return x;
  }
  // A constant: tensors come only by reference.
  return schema_value<std::runtime_error>(
      v, type, where, graph_tag_name, [this](int index) { return device(index); },
      [&](const GraphValue& x) -> c10::IValue {
        // A number where the schema has a Tensor (AOTAutograd writes x * 2 as mul.Tensor(x, 2)):
        // a wrapped number, as eager PyTorch makes it, so type promotion treats it as a scalar.
        at::Tensor t;
        if (x.tag == kInt) t = at::scalar_tensor(x.i, at::kLong);
        else if (x.tag == kDouble) t = at::scalar_tensor(x.d, at::kDouble);
        else if (x.tag == kBool) t = at::scalar_tensor(x.b, at::kBool);
        else if (x.tag == kComplex) t = at::scalar_tensor(c10::complex<double>(x.d, x.im), at::kComplexDouble);
        else throw std::runtime_error(where + ": expected Tensor (a graph input or node result), got " + graph_tag_name(x.tag));
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return t;
      },
      [&](const GraphValue& e, const c10::TypePtr& t) { return graph_arg(e, t, inputs, results, where); });
}

void Session::graph_run(Reader& r) {
  uint64_t id = r.u64();
  int op_device = r.u8();
  uint32_t nin = r.u32();
  if (!r.ok() || nin > r.left()) throw GraphMalformed("truncated graph run");
  struct In {
    Tag tag;
    TensorDesc desc;
    int64_t i = 0;
    double d = 0;
    bool b = false;
  };
  std::vector<In> ins(nin);
  for (In& in : ins) {
    in.tag = static_cast<Tag>(r.u8());
    if (in.tag == kRemoteTensor) {
      if (!get_desc(r, &in.desc)) throw GraphMalformed("truncated graph input");
    } else if (in.tag == kInt) {
      in.i = r.get<int64_t>();
    } else if (in.tag == kDouble) {
      in.d = r.get<double>();
    } else if (in.tag == kBool) {
      in.b = r.u8() != 0;
    } else if (in.tag == kNone) {
    } else {
      throw GraphMalformed("a graph input that is not a tensor, a number or None");
    }
  }
  uint32_t nout = r.u32();
  if (!r.ok() || nout > r.left()) throw GraphMalformed("truncated graph run outputs");
  std::vector<std::optional<std::pair<TensorDesc, uint64_t>>> outs(nout);
  for (auto& o : outs) {
    uint8_t kind = r.u8();
    if (kind == kOutTensor) {
      TensorDesc d;
      d.storage = r.u64();
      uint64_t nbytes = r.u64();
      if (!get_shape(r, &d)) throw GraphMalformed("truncated graph output spec");
      o.emplace(std::move(d), nbytes);
    } else if (kind != kOutIgnore) {
      throw GraphMalformed("unknown graph output kind");
    }
  }
  if (!r.ok() || r.left() != 0) throw GraphMalformed("a graph run with trailing or missing bytes");

  auto it = graphs_.find(id);
  if (it == graphs_.end())
    throw std::runtime_error(log::format("compiled graph %llu does not exist on the server (its definition failed)",
                                         (unsigned long long)id));
  Graph& g = it->second;
  if (nin != g.ninputs || nout != g.outputs.size())
    throw std::runtime_error(log::format("compiled graph %llu takes %u inputs and gives %zu results; the run names %u and %u",
                                         (unsigned long long)id, g.ninputs, g.outputs.size(), nin, nout));
  device(op_device);  // checks the index
  std::vector<c10::IValue> inputs;
  inputs.reserve(nin);
  for (const In& in : ins) {
    switch (in.tag) {
      case kRemoteTensor: inputs.emplace_back(tensor(in.desc)); break;
      case kInt: inputs.emplace_back(in.i); break;
      case kDouble: inputs.emplace_back(in.d); break;
      case kBool: inputs.emplace_back(in.b); break;
      default: inputs.emplace_back(); break;
    }
  }
  std::vector<c10::IValue> results;
  if (g.mode == Graph::Mode::kUndecided) decide_mode(id, g, inputs);  // compiles: not in the run's time
  auto began = std::chrono::steady_clock::now();
  if (graph_run_inductor(id, g, inputs, &results)) {
    ++g.inductor_runs;
  } else {
    std::vector<bool> wanted(nout);
    for (size_t k = 0; k < nout; ++k) wanted[k] = outs[k].has_value();
    results = graph_run_ops(g, inputs, wanted);
    ++g.op_runs;
  }
  g.run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (results.size() != nout)
    throw std::runtime_error(log::format("compiled graph %llu gave %zu results, not %u", (unsigned long long)id, results.size(), nout));
  // Bound as kTorchCall binds its results: a result whose layout differs from what the client
  // recorded (Inductor chooses its own strides) is copied into the promised one (Session::bind).
  for (size_t k = 0; k < nout; ++k) {
    if (!outs[k]) continue;
    if (!results[k].isTensor()) throw std::runtime_error(log::format("graph result %zu is not a tensor", k));
    if (!bind(outs[k]->first, outs[k]->second, results[k].toTensor(), op_device)) ++g.copied_results;
  }
}

void Session::log_graph_summary() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, g] : graphs_)
    if (g.inductor_runs + g.op_runs) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    const Graph& g = graphs_.at(id);
    uint64_t runs = g.inductor_runs + g.op_runs;
    log::info("graph %llu: %llu runs (%llu by Inductor, %llu op by op), %.2f ms of host time a run, %.1f results copied "
              "a run (%zu ops)",
              (unsigned long long)id, (unsigned long long)runs, (unsigned long long)g.inductor_runs,
              (unsigned long long)g.op_runs, 1000 * g.run_seconds / runs, double(g.copied_results) / runs, g.nodes.size());
  }
}

namespace {

// What Inductor's code for a graph depends on in its inputs (Graph::signature): per input its
// kind, then for a tensor its dtype, device, sizes, strides, storage offset and storage size (the
// bounds Inductor's compile checked views such as as_strided against: the generated code does not
// check them again), whether its data is 16-byte aligned (the generated code may assume it was)
// and which earlier input shares its storage; a number's value (Inductor specializes on it).
std::vector<int64_t> input_signature(const std::vector<c10::IValue>& inputs) {
  std::vector<int64_t> sig;
  std::vector<const c10::StorageImpl*> storages;
  for (const c10::IValue& x : inputs) {
    if (x.isTensor()) {
      const at::Tensor& t = x.toTensor();
      sig.push_back(1);
      sig.push_back(static_cast<int64_t>(t.scalar_type()));
      sig.push_back(static_cast<int64_t>(t.device().type()));
      sig.push_back(t.device().index());
      sig.push_back(t.dim());
      sig.insert(sig.end(), t.sizes().begin(), t.sizes().end());
      sig.insert(sig.end(), t.strides().begin(), t.strides().end());
      sig.push_back(t.storage_offset());
      sig.push_back(static_cast<int64_t>(t.storage().nbytes()));
      sig.push_back(reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0);
      const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
      auto same = std::find(storages.begin(), storages.end(), impl);
      sig.push_back(same == storages.end() ? -1 : same - storages.begin());
      storages.push_back(impl);
    } else if (x.isInt()) {
      sig.insert(sig.end(), {2, x.toInt()});
    } else if (x.isDouble()) {
      double d = x.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      sig.insert(sig.end(), {3, bits});
    } else if (x.isBool()) {
      sig.insert(sig.end(), {4, x.toBool()});
    } else {
      sig.push_back(0);
    }
  }
  return sig;
}

}  // namespace

void Session::decide_mode(uint64_t id, Graph& g, const std::vector<c10::IValue>& inputs) {
  g.mode = Graph::Mode::kOpByOp;
  if (!opt_.inductor) return;
  // Inductor compiles without the bounds checks these skip (eager's kernels keep them).
  for (const GraphNode& n : g.nodes) {
    if (n.name.rfind("aten::_unsafe_", 0) == 0 && n.name.find("index") != std::string::npos) {
      log::warn("graph %llu runs op by op: it holds %s, which Inductor compiles without bounds checks",
                (unsigned long long)id, n.full.c_str());
      return;
    }
  }
  std::string why;
  auto began = std::chrono::steady_clock::now();
  g.program = inductor_.compile(id, g, inputs, [this](int index) { return device(index); }, &why);
  if (!g.program) {
    // One line per graph Inductor refused; one per session when Python itself did not start.
    if (!inductor_.python_failed() || !told_no_python_)
      log::warn("graph %llu runs op by op: %s", (unsigned long long)id, why.c_str());
    told_no_python_ = told_no_python_ || inductor_.python_failed();
    return;
  }
  g.mode = Graph::Mode::kInductor;
  g.signature = input_signature(inputs);
  log::info("graph %llu: compiled by Inductor (%zu ops) in %.1f s", (unsigned long long)id, g.nodes.size(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
}

bool Session::graph_run_inductor(uint64_t id, Graph& g, const std::vector<c10::IValue>& inputs,
                                 std::vector<c10::IValue>* out) {
  if (g.mode != Graph::Mode::kInductor) return false;
  if (input_signature(inputs) != g.signature) {
    if (!g.told_other_inputs)
      log::warn("graph %llu: a run's inputs differ (dtype, shape, strides, storage, device, alignment or aliasing) from those "
                "Inductor compiled it for; such runs go op by op",
                (unsigned long long)id);
    g.told_other_inputs = true;
    return false;
  }
  *out = inductor_.run(*g.program, inputs);
  if (out->size() != g.outputs.size())
    throw std::runtime_error(log::format("Inductor's code for graph %llu gave %zu results, the graph has %zu",
                                         (unsigned long long)id, out->size(), g.outputs.size()));
  return true;
}

std::vector<c10::IValue> Session::graph_run_ops(const Graph& g, const std::vector<c10::IValue>& inputs,
                                                const std::vector<bool>& wanted) {
  std::vector<torch::jit::Stack> results(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const GraphNode& n = g.nodes[k];
    const c10::FunctionSchema& schema = n.op->schema();
    torch::jit::Stack stack;
    stack.reserve(n.args.size());
    for (size_t a = 0; a < n.args.size(); ++a)
      stack.push_back(graph_arg(n.args[a], schema.arguments()[a].type(), inputs, results,
                                log::format("node %zu (%s) argument '", k, n.full.c_str()) + schema.arguments()[a].name() + "'"));
    if (n.name == "aten::_index_put_impl_" && stack.size() == 5) stack[4] = false;  // as kTorchCall: never unsafe
    torch::jit::Stack keep_alive = stack;  // see Session::call
    try {
      n.op->callBoxed(&stack);
    } catch (const c10::Error& e) {
      throw KindError(error_kind(e), log::format("node %zu (%s): ", k, n.full.c_str()) + e.what_without_backtrace());
    }
    results[k] = std::move(stack);
    // Release what no later node reads.
    for (const GraphValue& a : n.args) {
      std::function<void(const GraphValue&)> drop = [&](const GraphValue& v) {
        if (v.tag == kGraphNode && g.nodes[v.node].last_use == k) results[v.node].clear();
        for (const GraphValue& e : v.list) drop(e);
      };
      drop(a);
    }
  }
  std::vector<c10::IValue> out(g.outputs.size());
  for (size_t k = 0; k < out.size(); ++k)
    if (k < wanted.size() && wanted[k])
      out[k] = graph_arg(g.outputs[k], c10::TensorType::get(), inputs, results, log::format("graph result %zu", k));
  return out;
}

}  // namespace rgpu::opserver
