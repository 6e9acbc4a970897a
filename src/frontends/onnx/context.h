// The state one ONNX import works in, and the helpers every op converter uses: inputs and
// outputs by position, typed attribute access with diagnostics, op creation with
// import-time constant folding, and the symbolic values of shape computations.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontends/onnx/import.h"
#include "frontends/onnx/onnx_proto.h"
#include "ir/core/builder.h"
#include "ir/core/ir.h"

namespace kiln::onnx {

// One ONNX value as the importer knows it: the IR value, its data when it is known at
// import time (initializers, constants and what folds from them), and, for 0-D/1-D integer
// tensors computed from shapes, each element as a symbolic expression.
struct Val {
  Value* v = nullptr;
  std::optional<HostTensor> value;
  std::optional<std::vector<SymExpr>> sym;

  const Type& type() const { return v->type(); }
  int64_t rank() const { return v->type().rank(); }
  ElemType elem() const { return v->type().elem(); }
};

class Ctx;
using Converter = std::function<Status(Ctx&)>;

struct ConverterEntry {
  Converter fn;
  int minOpset = 1; // first opset version kiln converts
};
using Registry = std::map<std::string, ConverterEntry, std::less<>>;

// Each family registers its converters (ops_*.cpp).
void registerElementwise(Registry& r);
void registerNn(Registry& r);
void registerReduce(Registry& r);
void registerShapeOps(Registry& r);
void registerMisc(Registry& r);
void registerLoss(Registry& r);
void registerQuant(Registry& r);
void registerRecurrent(Registry& r);
void registerSignal(Registry& r);
void registerControl(Registry& r);
void registerDataShaped(Registry& r);
void registerSequence(Registry& r);
const Registry& registry();

class Ctx {
public:
  Ctx(Module& m, Func& f, std::string file, const ImportOptions& opts, int opset);

  // ---- the node being converted ----
  void setNode(const pb::NodeProto* node);
  const pb::NodeProto& node() const { return *node_; }
  int opset() const { return opset_; }
  const std::string& file() const { return file_; }
  Loc loc() const;
  Diag err(const std::string& message) const;

  // Number of inputs, trailing empty names dropped; hasInput is false for "" (omitted).
  size_t numInputs() const;
  bool hasInput(size_t i) const;
  Result<Val> input(size_t i) const;
  size_t numOutputs() const { return static_cast<size_t>(node_->output_size()); }
  void setOutput(size_t i, Val v);

  // ---- attributes ----
  const pb::AttributeProto* attr(const std::string& name) const;
  Result<int64_t> attrInt(const std::string& name, int64_t fallback) const;
  Result<double> attrFloat(const std::string& name, double fallback) const;
  Result<std::string> attrStr(const std::string& name, const std::string& fallback) const;
  Result<std::vector<int64_t>> attrInts(const std::string& name,
                                        std::vector<int64_t> fallback = {}) const;
  Result<std::vector<double>> attrFloats(const std::string& name) const;
  Result<HostTensor> attrTensor(const std::string& name) const;

  // ---- building ----
  // Creates an op (result types from the shape rules, or `types` for ops that take them)
  // and folds it to a constant when every operand's data is known and the result is small.
  Result<Val> op(OpKind kind, const std::vector<Val>& operands, Attrs attrs = {},
                 std::vector<Type> types = {});
  Val constant(HostTensor t);
  // A module weight holding `t` (declared at the end of the import if still used).
  Result<Val> weight(const std::string& onnxName, HostTensor t);
  Val scalar(ElemType elem, double v);
  // `x` converted to `elem` (no op when it already has that type).
  Result<Val> cast(const Val& x, ElemType elem);

  // Data of an input that must be known at import time (shape arguments and the like); an
  // error naming what it is for when it depends on run-time data.
  Result<HostTensor> constInput(size_t i, const std::string& what) const;
  Result<std::vector<int64_t>> constInts(size_t i, const std::string& what) const;
  // Elements of a 0-D/1-D integer value as symbolic expressions (constants or `sym`).
  Result<std::vector<SymExpr>> symInts(size_t i, const std::string& what) const;
  static std::optional<std::vector<SymExpr>> symOf(const Val& v);

  Module& module() { return module_; }
  Func& func() { return func_; }
  const SymbolTable& symbols() const { return module_.symbols(); }
  const ImportOptions& options() const { return opts_; }

  std::map<std::string, Val, std::less<>> values;
  // ONNX names of the quantized tensors (DequantizeLinear inputs) whose dequantized value is
  // B of a MatMul or Gemm, directly or through Transpose: ops_quant.cpp keeps them as i8/u8
  // weights and dequantizes them in the IR, so the cpu matmul widens them while packing B.
  std::set<std::string, std::less<>> quantizedWeights;
  // Results with at most this many elements fold at import; larger ones stay run-time ops
  // (they would bloat the IR), except while QuantizeLinear quantizes a kept weight.
  int64_t foldLimit = int64_t{1} << 16;
  // Weights by kiln name: declaration and data.
  std::map<std::string, std::pair<WeightDecl, HostTensor>> pendingWeights;
  // Folder that external data files resolve against (empty: external data is an error).
  std::string baseDir;
  // What ops_control.cpp budgets while it unrolls subgraphs (If branches, Loop and Scan
  // bodies): the nodes converted (each iteration counted again) and the bytes of weights made
  // inside subgraphs (large folded values), so that a small model cannot make the importer
  // hang or exhaust memory. Subgraph initializers are imported once, however often their
  // subgraph is unrolled.
  int subgraphDepth = 0;
  // How many If branches around the node run only to be selected against the other (a
  // run-time condition): a host-side loop may not sit in one.
  int selectDepth = 0;
  int64_t subgraphNodes = 0;
  // Sequences (ops_sequence.cpp): the names SequenceEmpty made (loop-carried initial values
  // that become scan outputs), and the Loop outputs that hold a sequence stacked along dim 0.
  std::set<std::string, std::less<>> emptySequences;
  std::set<std::string, std::less<>> stackedSequences;
  int64_t subgraphWeightBytes = 0;
  std::map<const pb::TensorProto*, Val> subgraphInitializers;

private:
  Module& module_;
  Func& func_;
  Builder builder_;
  std::string file_;
  const ImportOptions& opts_;
  int opset_;
  const pb::NodeProto* node_ = nullptr;
};

// Converts the nodes of `g`, in order, into the current scope of `c.values` (importer.cpp).
Status convertNodes(Ctx& c, const pb::GraphProto& g);
// Binds an initializer in the current scope: a constant when small, else a weight.
Status addInitializer(Ctx& c, const pb::TensorProto& t);
// The same for an initializer of a graph the importer owns: its raw_data moves into the
// tensor (takeTensorFromProto), so the weight bytes are not held twice.
Status takeInitializer(Ctx& c, pb::TensorProto& t);

// `s` with bytes outside printable ASCII replaced by '?' (names from damaged files).
std::string printable(const std::string& s);

// A name usable after `@` or `%` in the text IR and as a symbol.
std::string identifier(const std::string& name, const std::string& fallback);

// Lowest and highest value of an integer element type.
int64_t intLowest(ElemType t);
int64_t intHighest(ElemType t);

// Shape helpers shared by converters.
// A 1-D i64 tensor.
HostTensor i64Tensor(const std::vector<int64_t>& v);
// A dim as a symbolic expression (an error for `?`).
Result<SymExpr> dimExpr(const Ctx& c, const Type& t, int64_t axis);
// `axis` in [-rank, rank) as [0, rank); an error naming the node otherwise.
Result<int64_t> normAxis(const Ctx& c, int64_t axis, int64_t rank);
// Reshape with a result shape given as dims.
Result<Val> reshapeTo(Ctx& c, const Val& x, const Shape& shape);
// A Loop node rewritten so that each loop-carried sequence the body only appends to is a
// scan output instead (ops_sequence.cpp): the new node (its body changed to match) and the
// names of its outputs that hold a sequence, stacked.
struct SequenceLoop {
  pb::NodeProto node;
  std::vector<std::string> stacked;
};
// For the node being converted (a Loop): the rewrite, or nothing when it carries no sequence
// from SequenceEmpty; an error for a carried sequence it does more with than append.
Result<std::optional<SequenceLoop>> sequencesAsScans(const Ctx& c);

// A fresh data-dependent symbol `base`, `base_1`, ... in [0, hi]: a result dim only running
// tells (ops_data_shaped.cpp, and a host-side loop's scan outputs).
Result<Dim> dataSymbol(Ctx& c, const std::string& base, int64_t hi);
// numpy broadcast of x to `shape`.
Result<Val> broadcastTo(Ctx& c, const Val& x, const Shape& shape);
// x[start:end] along axis (step 1).
Result<Val> sliceAxis(Ctx& c, const Val& x, int64_t axis, int64_t start, int64_t end);
// The attributes of a kiln conv for the node's Conv-style attributes (kernel_shape, strides,
// pads, dilations, group, auto_pad) over x and w.
Result<Attrs> convAttrs(Ctx& c, const Val& x, const Val& w);

} // namespace kiln::onnx
