// A `loop`'s iterations (runLoopIterations, shared by the interpreter, the executor's
// run_loop and the sim driver) and the interpreter's `loop` kernel: the body function is
// called while the iteration count and the condition allow, its carried values passed on to
// the next iteration and its scan slices stacked into the scan outputs.
#include <cstring>

#include "ir/interp/interp.h"
#include "ir/interp/kernels.h"

namespace kiln {

namespace {

// A scan output: the slices, one per iteration (each `elem` of shape `slice`), stacked along
// a new first dim; a slice of another type or shape is an error.
Result<HostTensor> stackSlices(const std::vector<HostTensor>& slices, ElemType elem,
                               const std::vector<int64_t>& slice, const Loc& loc,
                               const std::string& what) {
  int64_t per = 1;
  for (int64_t d : slice)
    if (d < 0 || __builtin_mul_overflow(per, d, &per))
      return error(loc, what + ": the slice shape " + interp::shapeStr(slice) + " is invalid");
  int64_t total = 0;
  if (__builtin_mul_overflow(per, static_cast<int64_t>(slices.size()), &total) ||
      total > interp::kMaxElements)
    return error(loc, what + ": " + std::to_string(slices.size()) + " slices of " +
                          interp::shapeStr(slice) + " are more elements than kiln allows");
  std::vector<int64_t> shape = {static_cast<int64_t>(slices.size())};
  shape.insert(shape.end(), slice.begin(), slice.end());
  HostTensor out = HostTensor::uninitialized(elem, shape);
  size_t bytes = static_cast<size_t>(per) * elemTypeBytes(elem);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].elem() != elem || slices[i].shape() != slice)
      return error(loc, what + ": iteration " + std::to_string(i) + " gives a slice of " +
                            interp::shapeStr(slices[i].shape()) + " " +
                            std::string(elemTypeName(slices[i].elem())) + ", not " +
                            interp::shapeStr(slice) + " " + std::string(elemTypeName(elem)));
    if (bytes) std::memcpy(out.mutableData() + i * bytes, slices[i].data(), bytes);
  }
  return out;
}

} // namespace

Result<std::vector<HostTensor>> runLoopIterations(std::vector<HostTensor> in, size_t carried,
                                                  const std::vector<Type>& scanTypes,
                                                  const SymbolBinding& binding,
                                                  const LoopBody& body, const Loc& loc) {
  const size_t scans = scanTypes.size();
  if (in.size() < 2 + carried || in[0].numElements() != 1 || in[1].numElements() != 1)
    return error(loc, "loop: needs the most iterations and the condition (one element each) "
                      "and " +
                          std::to_string(carried) + " carried values");
  // Each scan slice's shape: its scan output's type without the first dim (the count).
  std::vector<std::vector<int64_t>> sliceShapes;
  for (const Type& t : scanTypes) {
    std::vector<int64_t> shape;
    for (int64_t d = 1; d < t.rank(); ++d) {
      std::optional<int64_t> v =
          t.dim(d).isUnknown() ? std::nullopt : t.dim(d).expr().evaluate(binding);
      if (!v || *v < 0)
        return error(loc, "loop: dim " + std::to_string(d) + " of scan output " + t.str() +
                              " cannot be evaluated at run time");
      shape.push_back(*v);
    }
    sliceShapes.push_back(std::move(shape));
  }
  int64_t most = in[0].getI(0);
  bool cond = in[1].getI(0) != 0;
  std::vector<std::vector<HostTensor>> slices(scans);
  for (int64_t i = 0; cond && i < most; ++i) {
    if (i == kMaxLoopIterations)
      return error(loc, "the loop runs more than " + std::to_string(kMaxLoopIterations) +
                            " iterations, kiln's limit");
    in[0] = HostTensor(ElemType::I64, {});
    in[0].setI(0, i);
    in[1] = HostTensor(ElemType::I1, {});
    in[1].setI(0, 1);
    KILN_TRY(std::vector<HostTensor> out, body(in));
    if (out.size() != carried + 1 + scans || out[0].numElements() != 1)
      return error(loc, "loop: the body returned " + std::to_string(out.size()) +
                            " values; it must return the condition, " + std::to_string(carried) +
                            " carried values and " + std::to_string(scans) + " scan slices");
    cond = out[0].getI(0) != 0;
    for (size_t k = 0; k < carried; ++k) in[2 + k] = std::move(out[1 + k]);
    for (size_t j = 0; j < scans; ++j) slices[j].push_back(std::move(out[1 + carried + j]));
  }
  std::vector<HostTensor> results(
      std::make_move_iterator(in.begin() + 2),
      std::make_move_iterator(in.begin() + 2 + static_cast<long>(carried)));
  for (size_t j = 0; j < scans; ++j) {
    KILN_TRY(HostTensor s, stackSlices(slices[j], scanTypes[j].elem(), sliceShapes[j], loc,
                                       "loop scan output " + std::to_string(j)));
    results.push_back(std::move(s));
  }
  return results;
}

namespace interp {

KernelResult kernelLoop(const KernelCtx& c) {
  // Loops nest through their bodies (each body runs through `interpret`).
  static thread_local int depth = 0;
  if (depth >= kMaxLoopDepth)
    return opError(c, "loops nest more than " + std::to_string(kMaxLoopDepth) + " deep");
  std::string name = c.op.attrs().getStr("body");
  const Func* parent = c.op.parent();
  const Module* m = parent ? parent->parent() : nullptr;
  const Func* body = m ? m->lookupFunc(name) : nullptr;
  if (!body) return opError(c, "the body @" + name + " is not defined");
  if (!c.weights) return opError(c, "needs a weight store to run the body @" + name);
  auto carried = static_cast<size_t>(c.op.attrs().getInt("carried"));
  std::vector<Type> scanTypes;
  for (size_t r = carried; r < c.op.numResults(); ++r) scanTypes.push_back(c.op.result(r)->type());
  ++depth;
  struct Leave {
    ~Leave() { --depth; }
  } leave;
  return runLoopIterations(
      c.in, carried, scanTypes, c.binding,
      [&](const std::vector<HostTensor>& in) { return interpret(*body, in, *c.weights); },
      c.op.loc());
}

} // namespace interp
} // namespace kiln
