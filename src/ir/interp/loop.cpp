// The interpreter's `loop`: calls the body function while the iteration count and the
// condition allow, carrying its values from one iteration to the next and stacking its scan
// slices into the scan outputs.
#include <cstring>

#include "ir/interp/interp.h"
#include "ir/interp/kernels.h"

namespace kiln {

Result<HostTensor> stackScanSlices(const std::vector<HostTensor>& slices, ElemType elem,
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
  size_t scans = c.op.numResults() - std::min(c.op.numResults(), carried);
  if (c.in.size() < 2 + carried || c.in[0].numElements() != 1 || c.in[1].numElements() != 1)
    return opError(c, "needs the most iterations, the condition and " + std::to_string(carried) +
                          " carried values");
  // The shape of each scan slice: the scan output's type without its first dim (the
  // iteration count), evaluated over the symbols bound so far.
  std::vector<std::vector<int64_t>> sliceShapes;
  for (size_t j = 0; j < scans; ++j) {
    const Type& t = c.op.result(carried + j)->type();
    std::vector<int64_t> shape;
    for (int64_t d = 1; d < t.rank(); ++d) {
      std::optional<int64_t> v =
          t.dim(d).isUnknown() ? std::nullopt : t.dim(d).expr().evaluate(c.binding);
      if (!v)
        return opError(c, "dim " + std::to_string(d) + " of scan output " + t.str() +
                              " cannot be evaluated");
      shape.push_back(*v);
    }
    sliceShapes.push_back(std::move(shape));
  }
  int64_t most = c.in[0].getI(0);
  bool cond = c.in[1].getI(0) != 0;
  std::vector<HostTensor> values(c.in.begin() + 2, c.in.begin() + 2 + static_cast<long>(carried));
  std::vector<std::vector<HostTensor>> slices(scans);
  ++depth;
  struct Leave {
    ~Leave() { --depth; }
  } leave;
  for (int64_t i = 0; cond && i < most; ++i) {
    if (i == kMaxLoopIterations)
      return opError(c, "the loop runs more than " + std::to_string(kMaxLoopIterations) +
                            " iterations, kiln's limit");
    HostTensor iter(ElemType::I64, {}), flag(ElemType::I1, {});
    iter.setI(0, i);
    flag.setI(0, 1);
    std::vector<HostTensor> in = {iter, flag};
    in.insert(in.end(), values.begin(), values.end());
    in.insert(in.end(), c.in.begin() + 2 + static_cast<long>(carried), c.in.end());
    KILN_TRY(std::vector<HostTensor> out, interpret(*body, in, *c.weights));
    if (out.size() != carried + 1 + scans || out[0].numElements() != 1)
      return opError(c, "the body @" + name + " must return the condition, " +
                            std::to_string(carried) + " carried values and " +
                            std::to_string(scans) + " scan slices");
    cond = out[0].getI(0) != 0;
    for (size_t k = 0; k < carried; ++k) values[k] = std::move(out[k + 1]);
    for (size_t j = 0; j < scans; ++j) slices[j].push_back(std::move(out[1 + carried + j]));
  }
  for (size_t j = 0; j < scans; ++j) {
    ElemType elem = c.op.result(carried + j)->type().elem();
    KILN_TRY(HostTensor s, stackScanSlices(slices[j], elem, sliceShapes[j], c.op.loc(),
                                           "loop scan output " + std::to_string(j)));
    values.push_back(std::move(s));
  }
  return values;
}

} // namespace interp
} // namespace kiln
