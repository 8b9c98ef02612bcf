// Compiled graphs (opserver/graph.h, protocol/torch_wire.h kTorchGraph, kTorchGraphRun): decoding
// a graph once, checking every reference and operator, then running it node by node through the
// dispatcher, each node's arguments built against its schema from constants, the run's inputs and
// earlier results.
#include <ATen/ATen.h>

#include "common/log.h"
#include "opserver/session.h"

namespace rgpu::opserver {

using namespace rgpu::torchwire;

namespace {

// A graph value; refs are checked against what precedes them (inputs, nodes before `node`).
GraphValue decode_graph_value(Reader& r, int depth, uint32_t ninputs, uint32_t node) {
  GraphValue v;
  v.tag = static_cast<Tag>(r.u8());
  if (!r.ok()) throw GraphMalformed("truncated graph value");
  switch (v.tag) {
    case kNone:
      break;
    case kBool:
      v.b = r.u8() != 0;
      break;
    case kInt:
      v.i = r.get<int64_t>();
      break;
    case kDouble:
      v.d = r.get<double>();
      break;
    case kComplex:
      v.d = r.get<double>();
      v.im = r.get<double>();
      break;
    case kString:
      v.s = r.str(kMaxString);
      break;
    case kDevice:
      v.device_kind = r.u8();
      v.device_index = r.get<int8_t>();
      if (v.device_kind > kDeviceMeta) throw GraphMalformed("unknown device kind");
      break;
    case kList: {
      if (depth >= static_cast<int>(kMaxListDepth)) throw GraphMalformed("lists nested too deep");
      uint32_t n = r.u32();
      if (!r.ok() || n > r.left()) throw GraphMalformed("list longer than the message");
      v.list.reserve(n);
      for (uint32_t k = 0; k < n; ++k) v.list.push_back(decode_graph_value(r, depth + 1, ninputs, node));
      break;
    }
    case kGraphInput:
      v.node = r.u32();
      if (r.ok() && v.node >= ninputs) throw GraphMalformed("a graph references an input it does not have");
      break;
    case kGraphNode:
      v.node = r.u32();
      v.ret = r.u32();
      v.elem = r.get<int32_t>();
      if (r.ok() && v.node >= node) throw GraphMalformed("a graph node references a node that does not precede it");
      if (r.ok() && v.elem < -1) throw GraphMalformed("a negative list element in a graph reference");
      break;
    default:
      throw GraphMalformed(log::format("value tag %u is not allowed in a compiled graph", v.tag));
  }
  if (!r.ok()) throw GraphMalformed("truncated graph value");
  return v;
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
  auto mismatch = [&](const char* want) {
    return std::runtime_error(where + ": expected " + want + ", got " + graph_tag_name(v.tag));
  };
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

  switch (type->kind()) {
    case c10::TypeKind::OptionalType:
      if (v.tag == kNone) return c10::IValue();
      return graph_arg(v, type->castRaw<c10::OptionalType>()->getElementType(), inputs, results, where);
    case c10::TypeKind::NoneType:
      if (v.tag != kNone) throw mismatch("None");
      return c10::IValue();
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      if (v.tag != kInt) throw mismatch("int");
      return v.i;
    case c10::TypeKind::ScalarTypeType:
      if (v.tag != kInt || v.i < INT8_MIN || v.i > INT8_MAX || !dtype_accepted(static_cast<int8_t>(v.i))) throw mismatch("a dtype");
      return v.i;
    case c10::TypeKind::LayoutType:
      if (v.tag != kInt || v.i != static_cast<int64_t>(at::kStrided)) throw std::runtime_error(where + ": only the strided layout is supported");
      return v.i;
    case c10::TypeKind::MemoryFormatType:
      if (v.tag != kInt || v.i < 0 || v.i >= static_cast<int64_t>(c10::MemoryFormat::NumOptions)) throw mismatch("a memory format");
      return v.i;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      if (v.tag == kDouble) return v.d;
      if (v.tag == kInt) return static_cast<double>(v.i);
      throw mismatch("float");
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
      if (v.tag != kBool) throw mismatch("bool");
      return v.b;
    case c10::TypeKind::ComplexType:
      if (v.tag != kComplex) throw mismatch("complex");
      return c10::complex<double>(v.d, v.im);
    case c10::TypeKind::NumberType:
      if (v.tag == kInt) return v.i;
      if (v.tag == kDouble) return v.d;
      if (v.tag == kBool) return v.b;
      if (v.tag == kComplex) return c10::complex<double>(v.d, v.im);
      throw mismatch("a number");
    case c10::TypeKind::StringType:
      if (v.tag != kString) throw mismatch("str");
      return v.s;
    case c10::TypeKind::DeviceObjType:
      if (v.tag != kDevice) throw mismatch("device");
      if (v.device_kind == kDeviceRemote) return device(v.device_index);
      if (v.device_kind == kDeviceMeta) return c10::Device(c10::kMeta);
      return c10::Device(c10::kCPU);
    case c10::TypeKind::ListType: {
      if (v.tag != kList) throw mismatch("a list");
      c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      c10::impl::GenericList out(elem);
      out.reserve(v.list.size());
      for (const GraphValue& e : v.list) out.push_back(graph_arg(e, elem, inputs, results, where));
      return out;
    }
    case c10::TypeKind::TensorType: {
      // A number where the schema has a Tensor (AOTAutograd writes x * 2 as mul.Tensor(x, 2)):
      // a wrapped number, as eager PyTorch makes it, so type promotion treats it as a scalar.
      at::Tensor t;
      if (v.tag == kInt) t = at::scalar_tensor(v.i, at::kLong);
      else if (v.tag == kDouble) t = at::scalar_tensor(v.d, at::kDouble);
      else if (v.tag == kBool) t = at::scalar_tensor(v.b, at::kBool);
      else if (v.tag == kComplex) t = at::scalar_tensor(c10::complex<double>(v.d, v.im), at::kComplexDouble);
      else throw mismatch("Tensor (a graph input or node result)");
      t.unsafeGetTensorImpl()->set_wrapped_number(true);
      return t;
    }
    case c10::TypeKind::GeneratorType:
      throw std::runtime_error(where + ": generators cannot be sent to the server; use torch.manual_seed");
    default:
      throw std::runtime_error(where + ": arguments of type " + type->str() + " are not supported by rgpu");
  }
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
  const Graph& g = it->second;
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
  for (size_t k = 0; k < nout; ++k) {
    if (!outs[k]) continue;
    c10::IValue v = graph_arg(g.outputs[k], c10::TensorType::get(), inputs, results, log::format("graph result %zu", k));
    if (!v.isTensor()) throw std::runtime_error(log::format("graph result %zu is not a tensor", k));
    bind(outs[k]->first, outs[k]->second, v.toTensor(), op_device);
  }
}

}  // namespace rgpu::opserver
