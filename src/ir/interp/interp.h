// The reference interpreter: evaluates tensor-level functions in the most obvious way,
// with wide accumulation (f64 for floats, int64 for integers). It is the oracle of every
// differential test and the `ref` device.
#pragma once

#include <functional>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"
#include "ir/io/weights.h"

namespace kiln {

// Runs `f` on inputs (one per argument). Symbols are bound from the inputs' shapes and
// checked against their ranges and divisibility; every result's shape is checked against
// its type under that binding. Wrong input count, element type, rank or size, and
// run-time failures (index out of range) are errors, never crashes.
Result<std::vector<HostTensor>> interpret(const Func& f, const std::vector<HostTensor>& inputs,
                                          WeightStore& weights);

// The most iterations one `loop` runs (interpreter and executor): a model whose loop would
// run longer gets an error, not a hang.
inline constexpr int64_t kMaxLoopIterations = int64_t(1) << 20;
// The most `loop`s one may run inside the bodies of others (a body calling a loop whose body
// calls the first again would otherwise recurse until the stack ends).
inline constexpr int kMaxLoopDepth = 16;

// One `loop`'s iterations, for the interpreter, the executor's run_loop and the sim driver:
// `in` holds the most iterations, the initial condition, the carried values and the
// invariants; `body` runs one iteration on (i, true, carried..., invariants...) and returns
// (condition, carried..., scan slices...). The result: the carried values after the last
// iteration, then each scan output, its slices stacked along a new first dim (scanTypes: the
// scan outputs' types, whose dims after the first are evaluated over `binding`). At most
// kMaxLoopIterations iterations; errors name `loc`.
using LoopBody = std::function<Result<std::vector<HostTensor>>(const std::vector<HostTensor>& in)>;
Result<std::vector<HostTensor>> runLoopIterations(std::vector<HostTensor> in, size_t carried,
                                                  const std::vector<Type>& scanTypes,
                                                  const SymbolBinding& binding,
                                                  const LoopBody& body, const Loc& loc);

// Like interpret, starting from symbols already bound (a runtime kernel receives the
// caller's binding, so result dims may use symbols its own inputs do not carry).
Result<std::vector<HostTensor>> interpretBound(const Func& f, const std::vector<HostTensor>& inputs,
                                               WeightStore& weights, SymbolBinding binding);

// Binds the symbols of `f`'s argument types from the inputs' shapes (adding to `binding`,
// which must agree with what is already bound) and checks count, element types, shapes,
// ranges and divisibility: the check every entry point applies to its caller's inputs.
Status bindArguments(const Func& f, const std::vector<HostTensor>& inputs, SymbolBinding& binding);

// Evaluates one op on concrete operands (used by constant folding). `resultTypes` give
// element types and, for ops that need them, shapes (resolved with `binding`).
Result<std::vector<HostTensor>> evalOp(const Op& op, const std::vector<HostTensor>& operands,
                                       const SymbolBinding& binding, WeightStore* weights);
// Adds to `binding` the data-dependent symbols that `op`'s result types name, from the
// shapes of `results` (what it produced), checking each against its range: what evalOpBinding
// does after running an op, for a driver that ran it another way (the sim driver's loops).
Status bindResultSymbols(const Op& op, const std::vector<HostTensor>& operands,
                         const std::vector<HostTensor>& results, SymbolBinding& binding);
// Like evalOp, and adds to `binding` the data-dependent symbols the op binds (a nonzero, or a
// dispatch of a kernel with one), for the ops after it.
Result<std::vector<HostTensor>> evalOpBinding(const Op& op, const std::vector<HostTensor>& operands,
                                              SymbolBinding& binding, WeightStore* weights);

} // namespace kiln
