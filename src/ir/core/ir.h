// The IR's structure: Module → Func → Op → Value, with use lists.
//
// A Func's body is a list of ops ending in `return`; values are SSA. Kernel-level ops may
// own regions (`for`'s body, `if`'s two branches): each region is a Block, a list of ops
// with its own arguments (a loop's counter and carried values) that ends in `yield`. A
// value defined in a block is visible in that block after its definition and in the
// blocks nested in it, never outside.
// Every Value is a function argument, a block argument or a result of exactly one Op; each
// Value keeps the list of (op, operand index) pairs that use it. All mutation goes through
// the methods here so use lists stay exact (the verifier checks them).
//
// Text form of a module (see docs/ir.md):
//   symbol seq in [1, 4096] divisible_by 8
//   weight @wq : tensor<256x256xf16> = "model.safetensors"["layers.0.wq"]
//   device @gpu1 = ref[1]
//   func @main(%x: tensor<{seq}x256xf32>) -> (tensor<{seq}x256xf32>) {
//     %0 = weight {name = "wq"} : tensor<256x256xf16>
//     %1 = cast %0 {to = f32} : tensor<256x256xf32>
//     %2 = matmul %x, %1 : tensor<{seq}x256xf32>
//     return %2
//   }
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/core/attrs.h"
#include "ir/core/device.h"
#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ops.h"
#include "ir/core/symexpr.h"
#include "ir/core/types.h"

namespace kiln {

class Op;
class Block;
class Func;
class Module;

struct Use {
  Op* user;
  unsigned operandIndex;
  bool operator==(const Use&) const = default;
};

class Value {
public:
  const Type& type() const { return type_; }
  void setType(Type t) { type_ = std::move(t); }
  // The defining op, or null for a function argument.
  Op* def() const { return def_; }
  // Result index in def(), or argument index (of the function or the block).
  unsigned index() const { return index_; }
  // A function argument (block arguments are not).
  bool isArg() const { return argOf_ != nullptr; }
  Func* argOf() const { return argOf_; }
  // An argument of a region's block (a loop counter, a loop-carried value).
  bool isBlockArg() const { return blockOf_ != nullptr; }
  Block* blockArgOf() const { return blockOf_; }
  // Optional readable name (function arguments, ONNX value names); printers may ignore it.
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  const std::vector<Use>& uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  // Points every use of this value at `other` instead.
  void replaceAllUsesWith(Value* other);

private:
  friend class Op;
  friend class Func;
  friend class Block;
  void removeUse(Op* user, unsigned index);
  Type type_;
  Op* def_ = nullptr;
  Func* argOf_ = nullptr;
  Block* blockOf_ = nullptr;
  unsigned index_ = 0;
  std::string name_;
  std::vector<Use> uses_;
};

class Op {
public:
  Op(OpKind kind, std::vector<Type> resultTypes, Attrs attrs, Loc loc);
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  OpKind kind() const { return kind_; }
  const OpInfo& info() const { return opInfo(kind_); }
  std::string_view name() const { return info().name; }
  bool has(uint32_t trait) const { return info().has(trait); }

  size_t numOperands() const { return operands_.size(); }
  Value* operand(size_t i) const { return operands_[i]; }
  const std::vector<Value*>& operands() const { return operands_; }
  void setOperand(size_t i, Value* v);
  void addOperand(Value* v);
  void setOperands(const std::vector<Value*>& vs);
  // Drops all operands (removing this op from their use lists).
  void dropOperands();

  size_t numResults() const { return results_.size(); }
  Value* result(size_t i = 0) const { return results_[i].get(); }

  Attrs& attrs() { return attrs_; }
  const Attrs& attrs() const { return attrs_; }
  const Loc& loc() const { return loc_; }
  void setLoc(Loc l) { loc_ = std::move(l); }
  // The function the op is in (at any depth), or null before it is inserted.
  Func* parent() const;
  // The block holding the op: its function's body or a region of another op.
  Block* block() const { return block_; }
  // The op whose region holds this one, or null at the top level of a function.
  Op* parentOp() const;

  // Regions (kernel level: `for` has its body, `if` its then and else blocks).
  size_t numRegions() const { return regions_.size(); }
  Block* region(size_t i) const { return regions_[i].get(); }
  Block* addRegion();

  // The device the op runs on (text: `on ref[1]`); unset until placement or affinity.
  // A device written in the input is a pin that affinity never moves.
  const std::optional<DeviceTarget>& device() const { return device_; }
  void setDevice(std::optional<DeviceTarget> d) { device_ = std::move(d); }

private:
  friend class Block;
  friend class Func;
  OpKind kind_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  Attrs attrs_;
  Loc loc_;
  std::optional<DeviceTarget> device_;
  Block* block_ = nullptr;
  std::list<std::unique_ptr<Op>>::iterator pos_;
  std::vector<std::unique_ptr<Block>> regions_;
};

// A list of ops with arguments: a function's body, or a region of an op.
class Block {
public:
  Block(Op* parentOp, Func* func) : parentOp_(parentOp), func_(func) {}
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  Value* addArg(Type type);
  size_t numArgs() const { return args_.size(); }
  Value* arg(size_t i) const { return args_[i].get(); }

  using OpList = std::list<std::unique_ptr<Op>>;
  const OpList& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  // The last op when it is a terminator (`return`, `yield`), else null.
  Op* terminator() const;
  // The op owning this region, or null for a function body.
  Op* parentOp() const { return parentOp_; }
  Func* func() const;
  // Whether this block is `other` or nested (at any depth) inside it.
  bool isWithin(const Block* other) const;

  // Inserts before `before` (null: at the end) and takes ownership.
  Op* insert(std::unique_ptr<Op> op, Op* before = nullptr);
  // Removes and destroys an op whose results have no uses.
  void erase(Op* op);
  // Moves `op` (of this block) to just before `before` (null: the end).
  void move(Op* op, Op* before);
  std::vector<Op*> opsSnapshot() const;
  // Drops every operand of every op in the block, at any depth (before destruction).
  void dropAllReferences();

private:
  friend class Func;
  Op* parentOp_;
  Func* func_;
  std::vector<std::unique_ptr<Value>> args_;
  OpList ops_;
};

// Calls fn on every op of the block in order, each op before the ops of its regions.
template <typename F> void walkOps(const Block& b, F&& fn) {
  for (const auto& op : b.ops()) {
    fn(*op);
    for (size_t r = 0; r < op->numRegions(); ++r) walkOps(*op->region(r), fn);
  }
}

class Func {
public:
  Func(std::string name, Loc loc) : name_(std::move(name)), loc_(std::move(loc)) {}
  ~Func();
  Func(const Func&) = delete;
  Func& operator=(const Func&) = delete;

  const std::string& name() const { return name_; }
  const Loc& loc() const { return loc_; }
  Module* parent() const { return parent_; }

  Value* addArg(Type type, std::string name = "");
  size_t numArgs() const { return args_.size(); }
  Value* arg(size_t i) const { return args_[i].get(); }
  // Declared result types (the verifier checks them against `return`).
  const std::vector<Type>& resultTypes() const { return resultTypes_; }
  void setResultTypes(std::vector<Type> ts) { resultTypes_ = std::move(ts); }

  // Devices of arguments and results (`%x: tensor<4xf32> on ref[0]`); unset entries are
  // placed by affinity, set ones are pins.
  std::optional<DeviceTarget> argDevice(size_t i) const;
  void setArgDevice(size_t i, std::optional<DeviceTarget> d);
  std::optional<DeviceTarget> resultDevice(size_t i) const;
  void setResultDevice(size_t i, std::optional<DeviceTarget> d);
  // Donation (`%cache: tensor<...> donate 1`): the caller gives argument i's storage to
  // result `donation(i)`, which is written over it in place (a KV cache updated by a
  // scatter_nd); analysis/donation.h says which computations can do that.
  std::optional<size_t> argDonation(size_t i) const;
  void setArgDonation(size_t i, std::optional<size_t> result);

  // The top-level ops (regions of kernel ops hold more; walkOps visits every op).
  using OpList = Block::OpList;
  const OpList& ops() const { return body_.ops(); }
  size_t numOps() const { return body_.ops().size(); }
  Block& body() { return body_; }
  const Block& body() const { return body_; }
  // The `return` op (last op), or null while the function is being built.
  Op* terminator() const { return body_.terminator(); }

  // Inserts before `before` (null: at the end of the body) and takes ownership; `before`
  // may be in a region, and the op then goes into that region.
  Op* insert(std::unique_ptr<Op> op, Op* before = nullptr);
  // Removes and destroys an op (at any depth) whose results have no uses.
  void erase(Op* op);
  // Moves `op` to just before `before` (null: the end of the body).
  void move(Op* op, Op* before);
  // Top-level ops in order, as a vector snapshot (safe to mutate while iterating).
  std::vector<Op*> opsSnapshot() const { return body_.opsSnapshot(); }

private:
  friend class Module;
  std::string name_;
  Loc loc_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Value>> args_;
  std::vector<Type> resultTypes_;
  std::vector<std::optional<DeviceTarget>> argDevices_, resultDevices_;
  std::vector<std::optional<size_t>> argDonations_;
  Block body_{nullptr, this};
};

// Every op of the function, each before the ops of its regions.
template <typename F> void walkOps(const Func& f, F&& fn) { walkOps(f.body(), fn); }

// A kernel after `lower`: it holds kernel-level ops or takes buffers (kernel IR), as
// opposed to a tensor-level kernel function that runs through the interpreter.
bool isLoweredKernel(const Func& k);

// An `alloc {uninit = 1}`: a private buffer that no backend fills with zeros.
bool uninitAlloc(const Op& op);

// Names of the functions that some host `launch` or tensor-level `dispatch` in the module
// runs (kernels, not entries).
std::set<std::string> kernelFunctions(const Module& m);

// A weight stored outside the IR text, loaded lazily (mmap) from a safetensors file.
// A weight's part along one dim (text: `shard INDEX of COUNT along AXIS`): the declaration's
// type is the file tensor's with dim `axis` divided by `count`, and the data is piece `index`
// of `count` equal pieces (tensor parallelism splits weights this way at compile time).
struct WeightShard {
  int64_t axis = 0;
  int64_t index = 0;
  int64_t count = 1;
  friend bool operator==(const WeightShard&, const WeightShard&) = default;
};

struct WeightDecl {
  std::string name;
  Type type;
  std::string file;   // as written; relative paths resolve against Module::baseDir
  std::string tensor; // tensor name inside the file
  Loc loc;
  std::optional<WeightShard> shard; // only this part of the file's tensor
};

class Module {
public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  SymbolTable& symbols() { return symbols_; }
  const SymbolTable& symbols() const { return symbols_; }

  Func* addFunc(std::unique_ptr<Func> f);
  Func* lookupFunc(std::string_view name) const;
  // Puts `f` in the place of `old` (same position) and hands `old` back to the caller.
  std::unique_ptr<Func> replaceFunc(Func* old, std::unique_ptr<Func> f);
  // Takes `f` out of the module and hands it back (null when it is not the module's).
  std::unique_ptr<Func> removeFunc(Func* f);
  const std::vector<std::unique_ptr<Func>>& funcs() const { return funcs_; }

  Status addWeight(WeightDecl w);
  const WeightDecl* lookupWeight(std::string_view name) const;
  // Drops a declaration (and its data held in memory); no op may load it any more.
  void removeWeight(std::string_view name);
  const std::vector<WeightDecl>& weights() const { return weights_; }
  // Weight data held in memory instead of a file (an ONNX model imported to run or compile
  // without writing its weights out); WeightStore prefers it to the declaration's file.
  void setWeightData(const std::string& name, HostTensor t) { weightData_[name] = std::move(t); }
  const HostTensor* weightData(const std::string& name) const {
    auto it = weightData_.find(name);
    return it == weightData_.end() ? nullptr : &it->second;
  }

  // Declared device targets, in declaration order (the first is the default device).
  // Fails when the name or the target is already declared.
  Status addDevice(DeviceDecl d);
  const std::vector<DeviceDecl>& devices() const { return devices_; }
  const DeviceDecl* lookupDevice(std::string_view name) const;
  const DeviceDecl* findDevice(const DeviceTarget& t) const;

  // Directory that relative weight paths are resolved against (the .kir file's folder).
  const std::string& baseDir() const { return baseDir_; }
  void setBaseDir(std::string d) { baseDir_ = std::move(d); }

private:
  SymbolTable symbols_;
  std::vector<WeightDecl> weights_;
  std::map<std::string, HostTensor> weightData_;
  std::vector<DeviceDecl> devices_;
  std::vector<std::unique_ptr<Func>> funcs_;
  std::string baseDir_;
};

} // namespace kiln
