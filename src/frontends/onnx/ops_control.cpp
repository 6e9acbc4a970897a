// Converters for the control-flow ops If, Loop and Scan, resolved at import time.
//
// kiln functions are straight-line, so each subgraph is imported inline, in its own scope:
// the names of the enclosing graphs stay visible (as ONNX requires), the subgraph's own
// names are dropped when it ends. If imports only the taken branch when its condition is
// known at import; otherwise both branches run and each output is a select on the
// condition. Loop is unrolled when its trip count and condition are known at import
// (each iteration's condition must fold), and otherwise runs on the host side of the
// schedule: its body becomes a function of the module that a `loop` op calls (hostLoop);
// Scan is unrolled over its static sequence length.
// Unrolling stops with an error past kMaxIterations iterations of one loop,
// kMaxSubgraphNodes converted subgraph nodes in the whole model, or kMaxSubgraphWeightBytes
// of large values folded inside subgraphs, so a fuzzed model cannot hang the importer or
// exhaust memory.
#include <algorithm>
#include <set>

#include "frontends/onnx/context.h"
#include "frontends/onnx/tensor.h"
#include "ir/interp/interp.h"

namespace kiln::onnx {

namespace {

constexpr int64_t kMaxIterations = 4096;
constexpr int64_t kMaxSubgraphNodes = int64_t{1} << 16;
constexpr int64_t kMaxSubgraphWeightBytes = int64_t{16} << 20;

Result<const pb::GraphProto*> graphAttr(const Ctx& c, const std::string& name) {
  const pb::AttributeProto* a = c.attr(name);
  if (!a) return c.err("attribute '" + name + "' (a subgraph) is missing");
  if (a->type() != pb::AttributeProto::GRAPH || !a->has_g())
    return c.err("attribute '" + name + "' must be a GRAPH");
  return &a->g();
}

// Imports subgraph `g` of the current node inline with its formal inputs bound to `inputs`
// and returns its outputs; `what` names it in diagnostics ("then_branch", "body in
// iteration 3").
Result<std::vector<Val>> importSubgraph(Ctx& c, const pb::GraphProto& g,
                                        const std::vector<Val>& inputs, const std::string& what) {
  if (static_cast<size_t>(g.input_size()) != inputs.size())
    return c.err(what + " declares " + std::to_string(g.input_size()) + " inputs; the node binds " +
                 std::to_string(inputs.size()));
  c.subgraphNodes += g.node_size();
  if (c.subgraphNodes > kMaxSubgraphNodes)
    return c.err("importing " + what + " exceeds kiln's budget of " +
                 std::to_string(kMaxSubgraphNodes) +
                 " converted subgraph nodes (control flow is unrolled at import; nested or long "
                 "loops multiply their bodies)");
  const pb::NodeProto* node = &c.node();
  auto outer = c.values;
  ++c.subgraphDepth;
  Status s = [&]() -> Status {
    for (const auto& t : g.initializer()) {
      if (auto it = c.subgraphInitializers.find(&t); it != c.subgraphInitializers.end()) {
        c.values[t.name()] = it->second;
        continue;
      }
      KILN_CHECK(addInitializer(c, t));
      c.subgraphInitializers[&t] = c.values[t.name()];
    }
    for (int i = 0; i < g.input_size(); ++i) c.values[g.input(i).name()] = inputs[i];
    KILN_CHECK(convertNodes(c, g));
    c.setNode(node);
    if (c.subgraphWeightBytes > kMaxSubgraphWeightBytes)
      return c.err("the values folded inside subgraphs exceed kiln's budget of " +
                   std::to_string(kMaxSubgraphWeightBytes >> 20) +
                   " MiB (control flow is unrolled at import)");
    return ok();
  }();
  --c.subgraphDepth;
  std::vector<Val> out;
  for (int i = 0; s.ok() && i < g.output_size(); ++i) {
    auto it = c.values.find(g.output(i).name());
    if (it == c.values.end()) {
      c.setNode(node);
      s = c.err(what + " output '" + printable(g.output(i).name()) + "' is never computed");
      break;
    }
    out.push_back(it->second);
  }
  c.values = std::move(outer);
  c.setNode(node);
  if (!s.ok()) {
    Diags d = s.takeDiags();
    if (!d.list.empty() && d.list[0].loc.file != c.loc().file)
      d.list[0].notes.push_back(note(c.loc(), "in " + what + " of this node"));
    return d;
  }
  return out;
}

// Drops the initializers of every subgraph of `node` (nested ones too) from the cache of
// imported subgraph initializers, before the node's protobuf is freed.
void forgetInitializers(Ctx& c, const pb::NodeProto& node) {
  auto graph = [&](const pb::GraphProto& g, auto& self) -> void {
    for (const auto& t : g.initializer()) c.subgraphInitializers.erase(&t);
    for (const auto& n : g.node())
      for (const auto& a : n.attribute()) {
        if (a.has_g()) self(a.g(), self);
        for (const auto& sub : a.graphs()) self(sub, self);
      }
  };
  for (const auto& a : node.attribute()) {
    if (a.has_g()) graph(a.g(), graph);
    for (const auto& sub : a.graphs()) graph(sub, graph);
  }
}

// The single element of a value known at import time, as a bool.
Result<bool> knownBool(const Ctx& c, const Val& v, const std::string& what) {
  if (v.value->numElements() != 1)
    return c.err(what + " must hold one element, not " + v.type().str());
  return v.value->getF(0) != 0;
}

// `parts` (one type) stacked along a new `axis`.
Result<Val> stack(Ctx& c, const std::vector<Val>& parts, int64_t axis) {
  std::vector<Val> rows;
  for (const Val& p : parts) {
    Shape s = p.type().shape();
    KILN_TRY(int64_t a, normAxis(c, axis, p.rank() + 1));
    s.insert(s.begin() + a, Dim(1));
    KILN_TRY(Val r, reshapeTo(c, p, s));
    rows.push_back(r);
  }
  KILN_TRY(int64_t a, normAxis(c, axis, parts[0].rank() + 1));
  if (rows.size() == 1) return rows[0];
  Attrs at;
  at.set("axis", a);
  return c.op(OpKind::Concat, rows, std::move(at));
}

// What a scan output of zero iterations is: an empty tensor of the body output's declared
// type with a dim of 0 at `axis` (the body never ran, so only the declaration says).
Result<Val> emptyStack(Ctx& c, const pb::ValueInfoProto& vi, int64_t axis) {
  const pb::TypeProto& t = vi.type();
  std::optional<ElemType> elem;
  if (t.has_tensor_type()) elem = elemTypeOf(t.tensor_type().elem_type());
  std::vector<int64_t> shape;
  bool known = elem && t.tensor_type().has_shape();
  for (int i = 0; known && i < t.tensor_type().shape().dim_size(); ++i) {
    const auto& d = t.tensor_type().shape().dim(i);
    known = d.has_dim_value() && d.dim_value() >= 0;
    if (known) shape.push_back(d.dim_value());
  }
  if (!known)
    return c.err("the loop runs zero iterations and the body does not declare a static type for "
                 "scan output '" +
                 printable(vi.name()) + "', so its shape is unknown");
  KILN_TRY(int64_t a, normAxis(c, axis, static_cast<int64_t>(shape.size()) + 1));
  shape.insert(shape.begin() + a, 0);
  return c.constant(HostTensor(*elem, shape));
}

Status ifOp(Ctx& c) {
  KILN_TRY(Val cond, c.input(0));
  KILN_TRY(const pb::GraphProto* thenG, graphAttr(c, "then_branch"));
  KILN_TRY(const pb::GraphProto* elseG, graphAttr(c, "else_branch"));
  for (const pb::GraphProto* g : {thenG, elseG})
    if (static_cast<size_t>(g->output_size()) != c.numOutputs())
      return c.err("a branch has " + std::to_string(g->output_size()) + " outputs; the node has " +
                   std::to_string(c.numOutputs()));
  if (!isBool(cond.elem())) return c.err("the condition must be bool, not " + cond.type().str());
  if (cond.value) {
    KILN_TRY(bool taken, knownBool(c, cond, "the condition"));
    KILN_TRY(auto outs,
             importSubgraph(c, taken ? *thenG : *elseG, {}, taken ? "then_branch" : "else_branch"));
    for (size_t i = 0; i < outs.size(); ++i) c.setOutput(i, outs[i]);
    return ok();
  }
  // A run-time condition: both branches run, and each output selects between them.
  if (cond.type().numElements() != std::optional<int64_t>(1))
    return c.err("the condition must hold one element, not " + cond.type().str());
  ++c.selectDepth;
  auto thenR = importSubgraph(c, *thenG, {}, "then_branch");
  auto elseR = thenR.ok() ? importSubgraph(c, *elseG, {}, "else_branch")
                          : Result<std::vector<Val>>(std::vector<Val>{});
  --c.selectDepth;
  if (!thenR.ok()) return thenR.takeDiags();
  if (!elseR.ok()) return elseR.takeDiags();
  std::vector<Val> thenOuts = std::move(*thenR), elseOuts = std::move(*elseR);
  KILN_TRY(Val scalarCond, reshapeTo(c, cond, Shape{}));
  for (size_t i = 0; i < thenOuts.size(); ++i) {
    if (thenOuts[i].type() != elseOuts[i].type())
      return c.err("the condition depends on run-time data and output " + std::to_string(i) +
                   " has type " + thenOuts[i].type().str() + " in then_branch but " +
                   elseOuts[i].type().str() +
                   " in else_branch; kiln selects between the branches only when their types "
                   "agree (or needs the condition at compile time)");
    KILN_TRY(Val out, c.op(OpKind::Select, {scalarCond, thenOuts[i], elseOuts[i]}));
    c.setOutput(i, out);
  }
  return ok();
}

Val i64Scalar(Ctx& c, int64_t v) {
  HostTensor t(ElemType::I64, {});
  t.setI(0, v);
  return c.constant(std::move(t));
}

Val boolScalar(Ctx& c, bool v) {
  HostTensor t(ElemType::I1, {});
  t.setI(0, v ? 1 : 0);
  return c.constant(std::move(t));
}

// The names a graph reads (node inputs, in nested subgraphs too) that none of its scopes
// defines: the enclosing graphs' values it captures.
void freeNames(const pb::GraphProto& g, std::set<std::string>& defined,
               std::set<std::string>& out) {
  std::set<std::string> inner = defined;
  for (const auto& i : g.input()) inner.insert(i.name());
  for (const auto& t : g.initializer()) inner.insert(t.name());
  for (const auto& node : g.node()) {
    for (const auto& in : node.input())
      if (!in.empty() && !inner.count(in)) out.insert(in);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) freeNames(a.g(), inner, out);
      for (const auto& sub : a.graphs()) freeNames(sub, inner, out);
    }
    for (const auto& o : node.output()) inner.insert(o);
  }
  for (const auto& o : g.output())
    if (!inner.count(o.name())) out.insert(o.name());
}

// A Loop whose trip count or condition is only known at run time: the body becomes a
// function of the module, @<node>_body(iteration, condition, carried..., captured...), and
// the node a `loop` op that the schedule runs on the host side, calling the compiled body
// once per iteration. The carried values keep their types; each scan output stacks the
// body's slices along a first dim whose length, the iteration count, is a data-dependent
// symbol `<first scan output>_len` in [0, M] (M the trip count when it is known at import,
// else kMaxLoopIterations). Captured values known at import (up to kMaxInlinedCapture
// elements) are constants inside the body; the others are passed in as loop-invariant
// operands. Such a loop may sit in another host-side loop's body or in a subgraph that
// always runs (an unrolled Loop or Scan), not in an If branch that runs only to be selected
// against the other.
constexpr int64_t kMaxInlinedCapture = 4096;

Status hostLoop(Ctx& c, const pb::GraphProto& g, size_t n, size_t k) {
  if (c.selectDepth > 0)
    return c.err("a loop with a run-time trip count or condition inside an If branch whose "
                 "condition is run-time data is not supported (kiln runs both branches and "
                 "selects, so the loop would also run when its branch is not taken)");
  Val most = c.scalar(ElemType::I64, 0);
  if (c.hasInput(0)) {
    KILN_TRY(most, c.input(0));
  } else {
    most = c.constant([] {
      HostTensor t(ElemType::I64, {});
      t.setI(0, INT64_MAX);
      return t;
    }());
  }
  Val cond = c.scalar(ElemType::I1, 1);
  if (c.hasInput(1)) {
    KILN_TRY(cond, c.input(1));
  }
  if (most.type().numElements() != std::optional<int64_t>(1) || !isInteger(most.elem()))
    return c.err("the trip count M must be one integer, not " + most.type().str());
  if (cond.type().numElements() != std::optional<int64_t>(1))
    return c.err("the condition must hold one element, not " + cond.type().str());
  KILN_TRY(most, c.cast(most, ElemType::I64));
  KILN_TRY(most, reshapeTo(c, most, {}));
  KILN_TRY(cond, c.cast(cond, ElemType::I1));
  KILN_TRY(cond, reshapeTo(c, cond, {}));
  std::vector<Val> carried;
  for (size_t i = 0; i < n; ++i) {
    KILN_TRY(Val v, c.input(i + 2));
    carried.push_back(v);
  }
  if (carried.empty() && (k == 0 || c.numOutputs() <= n)) return ok(); // nothing comes out
  int64_t hiIterations = kMaxLoopIterations;
  if (most.value) hiIterations = std::clamp<int64_t>(most.value->getI(0), 0, kMaxLoopIterations);

  // The captured values: inlined when known and small, else loop-invariant operands.
  std::set<std::string> defined, free;
  freeNames(g, defined, free);
  std::vector<std::pair<std::string, Val>> inlined, invariant;
  for (const std::string& name : free) {
    auto it = c.values.find(name);
    if (it == c.values.end()) continue; // convertNodes reports it inside the body
    const Val& v = it->second;
    if (v.value && v.value->numElements() <= kMaxInlinedCapture)
      inlined.emplace_back(name, v);
    else
      invariant.emplace_back(name, v);
  }

  std::string named = !c.node().name().empty() ? c.node().name()
                      : c.numOutputs()         ? c.node().output(0)
                                               : std::string();
  std::string base = identifier(named, "loop") + "_body";
  std::string fname = base;
  for (int i = 1; c.module().lookupFunc(fname); ++i) fname = base + "_" + std::to_string(i);
  Func* body = c.module().addFunc(std::make_unique<Func>(fname, c.loc()));
  Ctx b(c.module(), *body, c.file(), c.options(), c.opset());
  b.baseDir = c.baseDir;
  b.foldLimit = c.foldLimit;
  b.quantizedWeights = c.quantizedWeights;
  b.pendingWeights = std::move(c.pendingWeights); // one namespace of weights
  b.subgraphDepth = c.subgraphDepth + 1;
  b.subgraphNodes = c.subgraphNodes;
  Status s = [&]() -> Status {
    b.setNode(&c.node());
    auto arg = [&](const std::string& name, const Type& t) {
      b.values[name] = Val{body->addArg(t, identifier(name, "arg")), std::nullopt, std::nullopt};
    };
    arg(g.input(0).name(), Type(ElemType::I64, {}));
    arg(g.input(1).name(), Type(ElemType::I1, {}));
    for (size_t i = 0; i < n; ++i) arg(g.input(static_cast<int>(i + 2)).name(), carried[i].type());
    for (const auto& [name, v] : invariant) arg(name, v.type());
    for (const auto& [name, v] : inlined) {
      Val inner = b.constant(*v.value);
      inner.sym = v.sym;
      b.values[name] = inner;
    }
    for (const auto& t : g.initializer()) KILN_CHECK(addInitializer(b, t));
    KILN_CHECK(convertNodes(b, g));
    b.setNode(&c.node());
    std::vector<Value*> results;
    std::vector<Type> types;
    for (int i = 0; i < g.output_size(); ++i) {
      auto it = b.values.find(g.output(i).name());
      if (it == b.values.end())
        return b.err("the body's output '" + printable(g.output(i).name()) + "' is never computed");
      Val v = it->second;
      if (i == 0) {
        if (v.type().numElements() != std::optional<int64_t>(1))
          return b.err("the body's condition must hold one element, not " + v.type().str());
        KILN_TRY(v, b.cast(v, ElemType::I1));
        KILN_TRY(v, reshapeTo(b, v, {}));
      } else if (static_cast<size_t>(i) > n) {
        // A scan slice: its type must not depend on the iteration.
        if (v.type().hasUnknownDims())
          return b.err("the body's scan output '" + printable(g.output(i).name()) +
                       "' has an unknown dim (" + v.type().str() + ")");
      } else if (v.type() != carried[static_cast<size_t>(i - 1)].type()) {
        return b.err("the body changes loop-carried value " + std::to_string(i - 1) + " from " +
                     carried[static_cast<size_t>(i - 1)].type().str() + " to " + v.type().str() +
                     "; a loop that runs on the host side keeps each carried value's type");
      }
      results.push_back(v.v);
      types.push_back(v.type());
    }
    Builder bb(body);
    bb.setLoc(c.loc());
    bb.createUnchecked(OpKind::Return, results, {}, {});
    body->setResultTypes(types);
    return ok();
  }();
  c.pendingWeights = std::move(b.pendingWeights);
  c.subgraphNodes = b.subgraphNodes;
  c.setNode(&c.node());
  if (!s.ok()) {
    Diags d = s.takeDiags();
    if (!d.list.empty()) d.list[0].notes.push_back(note(c.loc(), "in the body of this Loop node"));
    return d;
  }

  std::vector<Val> operands = {most, cond};
  operands.insert(operands.end(), carried.begin(), carried.end());
  for (const auto& [name, v] : invariant) operands.push_back(v);
  std::vector<Type> types;
  for (const Val& v : carried) types.push_back(v.type());
  if (k > 0) {
    std::string scanName = c.numOutputs() > n ? c.node().output(static_cast<int>(n)) : "";
    KILN_TRY(Dim length,
             dataSymbol(c, (scanName.empty() ? "loop" : scanName) + "_len", hiIterations));
    for (size_t j = 0; j < k; ++j) {
      const Type& slice = body->resultTypes()[1 + n + j];
      Shape s = {length};
      s.insert(s.end(), slice.shape().begin(), slice.shape().end());
      types.emplace_back(slice.elem(), s);
    }
  }
  Attrs a;
  a.set("body", fname);
  a.set("carried", static_cast<int64_t>(n));
  KILN_TRY(Val first, c.op(OpKind::Loop, operands, std::move(a), types));
  Op* op = first.v->def();
  for (size_t i = 0; i < n + k && i < c.numOutputs(); ++i)
    c.setOutput(i, Val{op->result(i), {}, {}});
  return ok();
}

Status loopOp(Ctx& c) {
  // Sequences the body appends to become scan outputs (ops_sequence.cpp).
  KILN_TRY(std::optional<SequenceLoop> seq, sequencesAsScans(c));
  if (seq) {
    const pb::NodeProto* node = &c.node();
    c.setNode(&seq->node);
    Status s = loopOp(c);
    c.setNode(node);
    // The rewritten body goes away with `seq`: its initializers must leave the cache keyed by
    // their addresses.
    forgetInitializers(c, seq->node);
    KILN_CHECK(s);
    for (const std::string& name : seq->stacked) c.stackedSequences.insert(name);
    return ok();
  }
  KILN_TRY(const pb::GraphProto* body, graphAttr(c, "body"));
  const int nodeInputs = c.node().input_size();
  if (nodeInputs < 2) return c.err("Loop needs its inputs M and cond (either may be empty)");
  const size_t n = static_cast<size_t>(nodeInputs - 2); // loop-carried values
  if (static_cast<size_t>(body->input_size()) != n + 2)
    return c.err("the body declares " + std::to_string(body->input_size()) +
                 " inputs; a Loop with " + std::to_string(n) +
                 " loop-carried values needs 2 more (the iteration number and the condition)");
  if (static_cast<size_t>(body->output_size()) < n + 1)
    return c.err("the body declares " + std::to_string(body->output_size()) +
                 " outputs; it needs the condition and " + std::to_string(n) +
                 " loop-carried values");
  const size_t k = static_cast<size_t>(body->output_size()) - n - 1; // scan outputs
  if (c.numOutputs() > n + k)
    return c.err("the node has " + std::to_string(c.numOutputs()) + " outputs; the body gives " +
                 std::to_string(n + k));

  // A trip count or initial condition known only at run time: the loop runs on the host.
  for (size_t i = 0; i < 2; ++i) {
    if (!c.hasInput(i)) continue;
    KILN_TRY(Val v, c.input(i));
    if (!v.value) return hostLoop(c, *body, n, k);
  }
  std::optional<int64_t> trip;
  if (c.hasInput(0)) {
    KILN_TRY(Val m, c.input(0));
    if (m.value->numElements() != 1 || !isInteger(m.elem()))
      return c.err("the trip count M must be one integer, not " + m.type().str());
    trip = m.value->getI(0);
  }
  bool cond = true;
  if (c.hasInput(1)) {
    KILN_TRY(Val v, c.input(1));
    KILN_TRY(cond, knownBool(c, v, "the condition"));
  }
  std::vector<Val> carried;
  for (size_t i = 0; i < n; ++i) {
    KILN_TRY(Val v, c.input(i + 2));
    carried.push_back(v);
  }
  std::vector<std::vector<Val>> scans(k);
  for (int64_t it = 0; cond && (!trip || it < *trip); ++it) {
    if (it == kMaxIterations)
      return c.err("the loop runs more than " + std::to_string(kMaxIterations) +
                   " iterations, kiln's limit for unrolling at import");
    std::vector<Val> in{i64Scalar(c, it), boolScalar(c, cond)};
    in.insert(in.end(), carried.begin(), carried.end());
    KILN_TRY(auto outs,
             importSubgraph(c, *body, in, "the body in iteration " + std::to_string(it)));
    // A condition that depends on run-time data: the loop runs on the host after all.
    if (!outs[0].value) return hostLoop(c, *body, n, k);
    KILN_TRY(cond, knownBool(c, outs[0], "the body's condition"));
    for (size_t i = 0; i < n; ++i) carried[i] = outs[1 + i];
    for (size_t i = 0; i < k; ++i) scans[i].push_back(outs[1 + n + i]);
  }
  for (size_t i = 0; i < n; ++i) c.setOutput(i, carried[i]);
  for (size_t i = 0; i < k && n + i < c.numOutputs(); ++i) {
    if (scans[i].empty()) {
      KILN_TRY(Val e, emptyStack(c, body->output(static_cast<int>(1 + n + i)), 0));
      c.setOutput(n + i, e);
      continue;
    }
    KILN_TRY(Val s, stack(c, scans[i], 0));
    c.setOutput(n + i, s);
  }
  return ok();
}

struct ScanAxes {
  std::vector<int64_t> inAxes, inDirs, outAxes, outDirs;
};

// Runs `body` over the scan inputs `xs` along their axes; returns the final states followed
// by the scan outputs.
Result<std::vector<Val>> unrollScan(Ctx& c, const pb::GraphProto& body, std::vector<Val> states,
                                    const std::vector<Val>& xs, const ScanAxes& ax) {
  const size_t n = states.size();
  if (static_cast<size_t>(body.input_size()) != n + xs.size())
    return c.err("the body declares " + std::to_string(body.input_size()) +
                 " inputs; the node has " + std::to_string(n) + " states and " +
                 std::to_string(xs.size()) + " scan inputs");
  if (static_cast<size_t>(body.output_size()) < n)
    return c.err("the body declares " + std::to_string(body.output_size()) +
                 " outputs, fewer than the node's " + std::to_string(n) + " states");
  const size_t k = static_cast<size_t>(body.output_size()) - n;
  if (ax.inAxes.size() != xs.size() || ax.inDirs.size() != xs.size())
    return c.err("scan_input_axes and scan_input_directions need one entry per scan input (" +
                 std::to_string(xs.size()) + ")");
  if (ax.outAxes.size() != k || ax.outDirs.size() != k)
    return c.err("scan_output_axes and scan_output_directions need one entry per scan output (" +
                 std::to_string(k) + ")");
  if (xs.empty()) return c.err("a Scan needs at least one scan input");
  std::optional<int64_t> len;
  std::vector<int64_t> axes;
  for (size_t j = 0; j < xs.size(); ++j) {
    KILN_TRY(int64_t a, normAxis(c, ax.inAxes[j], xs[j].rank()));
    const Dim& d = xs[j].type().dim(a);
    if (!d.isStatic())
      return c.err("scan input " + std::to_string(j) + " has a dynamic sequence length (" +
                   xs[j].type().str() + "); kiln unrolls Scan at import and needs it static");
    if (len && *len != d.value())
      return c.err("the scan inputs have different sequence lengths (" + std::to_string(*len) +
                   " and " + std::to_string(d.value()) + ")");
    len = d.value();
    axes.push_back(a);
  }
  if (*len > kMaxIterations)
    return c.err("the sequence length " + std::to_string(*len) + " is more than " +
                 std::to_string(kMaxIterations) + ", kiln's limit for unrolling at import");
  std::vector<std::vector<Val>> scans(k);
  for (int64_t t = 0; t < *len; ++t) {
    std::vector<Val> in = states;
    for (size_t j = 0; j < xs.size(); ++j) {
      int64_t idx = ax.inDirs[j] ? *len - 1 - t : t;
      KILN_TRY(Val x, sliceAxis(c, xs[j], axes[j], idx, idx + 1));
      Shape s = x.type().shape();
      s.erase(s.begin() + axes[j]);
      KILN_TRY(x, reshapeTo(c, x, s));
      in.push_back(x);
    }
    KILN_TRY(auto outs, importSubgraph(c, body, in, "the body in iteration " + std::to_string(t)));
    for (size_t i = 0; i < n; ++i) states[i] = outs[i];
    for (size_t i = 0; i < k; ++i) scans[i].push_back(outs[n + i]);
  }
  std::vector<Val> out = states;
  for (size_t i = 0; i < k; ++i) {
    if (scans[i].empty()) {
      KILN_TRY(Val e, emptyStack(c, body.output(static_cast<int>(n + i)), ax.outAxes[i]));
      out.push_back(e);
      continue;
    }
    if (ax.outDirs[i]) std::reverse(scans[i].begin(), scans[i].end());
    KILN_TRY(Val s, stack(c, scans[i], ax.outAxes[i]));
    out.push_back(s);
  }
  return out;
}

Result<std::vector<int64_t>> directions(const Ctx& c, const std::string& name, size_t count) {
  KILN_TRY(auto v, c.attrInts(name, std::vector<int64_t>(count, 0)));
  for (int64_t d : v)
    if (d != 0 && d != 1) return c.err(name + " must hold 0 (forward) or 1 (reverse) only");
  return v;
}

Status scanOp(Ctx& c) {
  KILN_TRY(const pb::GraphProto* body, graphAttr(c, "body"));
  KILN_TRY(int64_t m, c.attrInt("num_scan_inputs", -1));
  const bool batched = c.opset() < 9; // opset 8: sequence_lens, then batch-major inputs
  const int first = batched ? 1 : 0;
  const int total = c.node().input_size() - first;
  if (m < 1 || m > total)
    return c.err("num_scan_inputs must be between 1 and the number of inputs (" +
                 std::to_string(total) + ")");
  std::vector<Val> states, xs;
  for (int i = 0; i < total; ++i) {
    KILN_TRY(Val v, c.input(static_cast<size_t>(first + i)));
    (i < total - m ? states : xs).push_back(v);
  }
  const size_t k = static_cast<size_t>(std::max(0, body->output_size() - (total - int(m))));
  if (c.numOutputs() > states.size() + k)
    return c.err("the node has " + std::to_string(c.numOutputs()) + " outputs; the body gives " +
                 std::to_string(states.size() + k));
  ScanAxes ax;
  if (!batched) {
    KILN_TRY(ax.inAxes, c.attrInts("scan_input_axes", std::vector<int64_t>(xs.size(), 0)));
    KILN_TRY(ax.inDirs, directions(c, "scan_input_directions", xs.size()));
    KILN_TRY(ax.outAxes, c.attrInts("scan_output_axes", std::vector<int64_t>(k, 0)));
    KILN_TRY(ax.outDirs, directions(c, "scan_output_directions", k));
    KILN_TRY(auto outs, unrollScan(c, *body, states, xs, ax));
    for (size_t i = 0; i < outs.size(); ++i) c.setOutput(i, outs[i]);
    return ok();
  }
  // Opset 8: every input has a leading batch dim, the sequence is axis 1, and the body runs
  // per batch entry; the results are stacked back along the batch.
  ax.inAxes.assign(xs.size(), 0);
  KILN_TRY(ax.inDirs, directions(c, "directions", xs.size()));
  ax.outAxes.assign(k, 0);
  ax.outDirs.assign(k, 0);
  std::vector<Val> all = states;
  all.insert(all.end(), xs.begin(), xs.end());
  const Dim& b0 = all[0].rank() > 0 ? all[0].type().dim(0) : Dim::unknown();
  if (!b0.isStatic())
    return c.err("opset 8 Scan needs a static batch dim 0, got " + all[0].type().str());
  const int64_t batch = b0.value();
  for (const Val& v : all)
    if (v.rank() < 1 || v.type().dim(0) != b0)
      return c.err("every input of opset 8 Scan needs batch dim " + std::to_string(batch) +
                   ", got " + v.type().str());
  if (c.hasInput(0)) {
    KILN_TRY(Val lens, c.input(0));
    bool full = lens.value.has_value();
    for (int64_t i = 0; full && i < lens.value->numElements(); ++i)
      full = xs[0].rank() > 1 && xs[0].type().dim(1).isStatic() &&
             lens.value->getI(i) == xs[0].type().dim(1).value();
    if (!full)
      return c.err("sequence_lens shorter than the scan inputs are not supported (kiln unrolls "
                   "Scan over the full static length)");
  }
  if (batch > kMaxIterations)
    return c.err("the batch " + std::to_string(batch) + " is more than " +
                 std::to_string(kMaxIterations) + ", kiln's limit for unrolling at import");
  std::vector<std::vector<Val>> perBatch(states.size() + k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Val> row;
    for (const Val& v : all) {
      KILN_TRY(Val x, sliceAxis(c, v, 0, b, b + 1));
      Shape s = x.type().shape();
      s.erase(s.begin());
      KILN_TRY(x, reshapeTo(c, x, s));
      row.push_back(x);
    }
    std::vector<Val> st(row.begin(), row.begin() + static_cast<long>(states.size()));
    std::vector<Val> sx(row.begin() + static_cast<long>(states.size()), row.end());
    KILN_TRY(auto outs, unrollScan(c, *body, st, sx, ax));
    for (size_t i = 0; i < outs.size(); ++i) perBatch[i].push_back(outs[i]);
  }
  for (size_t i = 0; i < perBatch.size() && i < c.numOutputs(); ++i) {
    if (perBatch[i].empty()) return c.err("opset 8 Scan with a batch of 0 is not supported");
    KILN_TRY(Val s, stack(c, perBatch[i], 0));
    c.setOutput(i, s);
  }
  return ok();
}

} // namespace

void registerControl(Registry& r) {
  r["If"] = {ifOp};
  r["Loop"] = {loopOp};
  r["Scan"] = {scanOp, 8};
}

} // namespace kiln::onnx
