// The one kind of ONNX sequence kiln converts: a list a Loop builds by appending one tensor
// per iteration, then stacks or concatenates. It is what PyTorch exports for a scripted loop
// that appends to a Python list and ends with torch.stack or torch.cat:
//
//   seq = SequenceEmpty()                       Loop(M, cond, x)  -> (x_out, seq_out)
//   Loop(M, cond, x, seq) -> (x_out, seq_out)   body: ... -> (cond, x', v)       (v: a scan)
//     body: ... seq' = SequenceInsert(seq, v)   ConcatFromSequence(seq_out) = seq_out moved
//   ConcatFromSequence(seq_out)                 or merged along the axis
//
// The loop-carried sequence becomes a scan output of the Loop (ops_control.cpp converts it,
// unrolled or on the host side), and ConcatFromSequence on it a transpose and a reshape. Any
// other use of a sequence is out of scope (docs/onnx.md, "Sequences").
#include <algorithm>

#include "frontends/onnx/context.h"

namespace kiln::onnx {

namespace {

// How often `name` is read by the nodes of `g` and of the subgraphs inside it, and whether
// it is one of g's outputs.
int64_t readsOf(const pb::GraphProto& g, const std::string& name) {
  int64_t n = 0;
  for (const auto& node : g.node()) {
    n += std::count(node.input().begin(), node.input().end(), name);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) n += readsOf(a.g(), name);
      for (const auto& sub : a.graphs()) n += readsOf(sub, name);
    }
  }
  for (const auto& o : g.output()) n += o.name() == name;
  return n;
}

const pb::GraphProto* bodyOf(const pb::NodeProto& node) {
  for (const auto& a : node.attribute())
    if (a.name() == "body" && a.has_g()) return &a.g();
  return nullptr;
}

Status sequenceEmptyOp(Ctx& c) {
  if (c.numOutputs() && !c.node().output(0).empty()) c.emptySequences.insert(c.node().output(0));
  return ok();
}

// ConcatFromSequence of a Loop's appended sequence, which kiln holds stacked along dim 0:
// new_axis = 1 stacks the elements along `axis` (dim 0 moved there), new_axis = 0
// concatenates them along it (dim 0 moved next to it and merged into it).
Status concatFromSequenceOp(Ctx& c) {
  if (!c.hasInput(0)) return c.err("the input sequence is missing");
  const std::string& name = c.node().input(0);
  if (!c.stackedSequences.count(name))
    return c.err("'" + printable(name) +
                 "' is a sequence kiln cannot hold: it converts only a sequence that a Loop "
                 "builds by appending (SequenceEmpty, then SequenceInsert at the end in the "
                 "body)");
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(int64_t newAxis, c.attrInt("new_axis", 0));
  const int64_t r = x.rank() - 1; // the rank of the elements
  if (newAxis == 0 && r == 0)
    return c.err("new_axis = 0 concatenates the elements along an axis, but they are scalars");
  KILN_TRY(int64_t a, normAxis(c, axis, newAxis ? r + 1 : r));
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= r; ++d) {
    if (d - 1 == a) perm.push_back(0);
    perm.push_back(d);
  }
  if (a == r) perm.push_back(0);
  Val moved = x;
  if (a != 0) {
    Attrs t;
    t.set("perm", perm);
    KILN_TRY(moved, c.op(OpKind::Transpose, {x}, std::move(t)));
  }
  if (newAxis) {
    c.setOutput(0, moved);
    return ok();
  }
  // Dims a (the sequence) and a + 1 (the elements' axis a) become one.
  Shape s = moved.type().shape();
  KILN_TRY(SymExpr len, dimExpr(c, moved.type(), a));
  KILN_TRY(SymExpr inner, dimExpr(c, moved.type(), a + 1));
  s[static_cast<size_t>(a)] = Dim(len * inner);
  s.erase(s.begin() + a + 1);
  KILN_TRY(Val out, reshapeTo(c, moved, s));
  c.setOutput(0, out);
  return ok();
}

} // namespace

Result<std::optional<SequenceLoop>> sequencesAsScans(const Ctx& c) {
  const pb::NodeProto& node = c.node();
  const pb::GraphProto* body = bodyOf(node);
  const int nodeInputs = node.input_size();
  if (!body || nodeInputs < 2) return std::optional<SequenceLoop>(); // loopOp reports it
  const int n = nodeInputs - 2;
  if (body->input_size() != n + 2 || body->output_size() < n + 1)
    return std::optional<SequenceLoop>();
  std::vector<int> seqs;
  std::vector<int> inserts; // the SequenceInsert node of each, in the body
  for (int i = 0; i < n; ++i) {
    if (!c.emptySequences.count(node.input(2 + i))) continue;
    const std::string& in = body->input(2 + i).name();
    const std::string& out = body->output(1 + i).name();
    int at = -1;
    for (int k = 0; k < body->node_size(); ++k)
      for (const std::string& o : body->node(k).output())
        if (o == out) at = k;
    const pb::NodeProto* ins = at >= 0 ? &body->node(at) : nullptr;
    if (!ins || ins->op_type() != "SequenceInsert" || ins->input_size() != 2 ||
        ins->input(0) != in || readsOf(*body, in) != 1 || readsOf(*body, out) != 1)
      return c.err("loop-carried value " + std::to_string(i) + " ('" +
                   printable(node.input(2 + i)) +
                   "') is a sequence; kiln converts a sequence that the body only appends to "
                   "(its output is SequenceInsert(its input, value), and nothing else reads "
                   "either), as a scan output");
    seqs.push_back(i);
    inserts.push_back(at);
  }
  if (seqs.empty()) return std::optional<SequenceLoop>();

  SequenceLoop l;
  l.node = node;
  pb::GraphProto* g = nullptr;
  for (auto& a : *l.node.mutable_attribute())
    if (a.name() == "body" && a.has_g()) g = a.mutable_g();
  auto isSeq = [&](int i) { return std::find(seqs.begin(), seqs.end(), i) != seqs.end(); };
  // The node: inputs without the sequences; outputs carried, scans, then the sequences.
  l.node.clear_input();
  l.node.clear_output();
  for (int i = 0; i < nodeInputs; ++i)
    if (i < 2 || !isSeq(i - 2)) l.node.add_input(node.input(i));
  auto nodeOutput = [&](int i) { return i < node.output_size() ? node.output(i) : std::string(); };
  for (int i = 0; i < n; ++i)
    if (!isSeq(i)) l.node.add_output(nodeOutput(i));
  for (int j = n; j < body->output_size() - 1; ++j) l.node.add_output(nodeOutput(j));
  for (int i : seqs) {
    l.node.add_output(nodeOutput(i));
    if (!nodeOutput(i).empty()) l.stacked.push_back(nodeOutput(i));
  }
  // The body: the same, the appended values as the last outputs, the inserts gone.
  g->clear_input();
  g->clear_output();
  for (int i = 0; i < n + 2; ++i)
    if (i < 2 || !isSeq(i - 2)) *g->add_input() = body->input(i);
  for (int i = 0; i < body->output_size(); ++i)
    if (i == 0 || !isSeq(i - 1)) *g->add_output() = body->output(i);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const pb::NodeProto& ins = body->node(inserts[s]);
    pb::ValueInfoProto* vi = g->add_output();
    vi->set_name(ins.input(1));
    const pb::TypeProto& t = body->output(1 + seqs[s]).type();
    if (t.has_sequence_type()) *vi->mutable_type() = t.sequence_type().elem_type();
  }
  g->clear_node();
  for (int k = 0; k < body->node_size(); ++k)
    if (std::find(inserts.begin(), inserts.end(), k) == inserts.end())
      *g->add_node() = body->node(k);
  return std::optional<SequenceLoop>(std::move(l));
}

void registerSequence(Registry& r) {
  r["SequenceEmpty"] = {sequenceEmptyOp, 11};
  r["ConcatFromSequence"] = {concatFromSequenceOp, 11};
}

} // namespace kiln::onnx
