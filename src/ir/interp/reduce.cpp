// Interpreter kernels for reductions and ops along one axis: reduce_*, argmax/argmin,
// cumsum, softmax and log_softmax. Sums accumulate in f64 (floats) or wrapping int64.
#include <algorithm>
#include <cmath>

#include "ir/interp/kernels.h"

namespace kiln::interp {
namespace {

// Where each input element lands in the reduced result.
struct ReducePlan {
  std::vector<int64_t> outShape;
  std::vector<int64_t> outStrideOfInputDim; // 0 for reduced dims
  int64_t count = 1;                        // elements folded into each result element
};

Result<ReducePlan> planReduce(const KernelCtx& c, const std::vector<int64_t>& shape) {
  auto rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes = c.op.attrs().getInts("axes");
  bool keepdims = c.op.attrs().getInt("keepdims", 1) != 0;
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t a : axes) {
    KILN_TRY(int64_t ax, normAxis(c, a, rank));
    if (reduced[static_cast<size_t>(ax)])
      return opError(c, "axis " + std::to_string(a) + " is listed twice");
    reduced[static_cast<size_t>(ax)] = true;
  }
  ReducePlan p;
  std::vector<int64_t> keptDims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) p.count *= shape[d];
    if (!reduced[d]) keptDims.push_back(static_cast<int64_t>(d));
    if (!reduced[d] || keepdims) p.outShape.push_back(reduced[d] ? 1 : shape[d]);
  }
  p.outStrideOfInputDim.assign(shape.size(), 0);
  int64_t stride = 1;
  for (size_t k = keptDims.size(); k-- > 0;) {
    auto d = static_cast<size_t>(keptDims[k]);
    p.outStrideOfInputDim[d] = stride;
    stride *= shape[d];
  }
  return p;
}

enum class Fold { Sum, Mean, Max, Min, Prod };

KernelResult reduce(const KernelCtx& c, Fold fold) {
  const HostTensor& x = c.in[0];
  ElemType e = x.elem();
  bool flt = isFloat(e);
  KILN_TRY(ReducePlan p, planReduce(c, x.shape()));
  KILN_TRY(HostTensor out, newTensor(c, e, p.outShape));
  int64_t n = out.numElements();
  double initF = fold == Fold::Max    ? -INFINITY
                 : fold == Fold::Min  ? INFINITY
                 : fold == Fold::Prod ? 1.0
                                      : 0.0;
  int64_t initI = fold == Fold::Max    ? intLowest(e)
                  : fold == Fold::Min  ? intHighest(e)
                  : fold == Fold::Prod ? 1
                                       : 0;
  std::vector<double> accF(static_cast<size_t>(flt ? n : 0), initF);
  std::vector<int64_t> accI(static_cast<size_t>(flt ? 0 : n), initI);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < x.numElements(); ++i) {
    unravel(i, x.shape(), idx);
    auto o = static_cast<size_t>(dot(idx, p.outStrideOfInputDim));
    if (flt) {
      double v = x.getF(i);
      double& a = accF[o];
      switch (fold) {
      case Fold::Sum:
      case Fold::Mean: a += v; break;
      case Fold::Prod: a *= v; break;
      case Fold::Max: a = fmaxNan(a, v); break;
      case Fold::Min: a = fminNan(a, v); break;
      }
    } else {
      int64_t v = x.getI(i);
      int64_t& a = accI[o];
      switch (fold) {
      case Fold::Sum:
      case Fold::Mean: a = wrapAdd(a, v); break;
      case Fold::Prod: a = wrapMul(a, v); break;
      case Fold::Max: a = std::max(a, v); break;
      case Fold::Min: a = std::min(a, v); break;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    auto o = static_cast<size_t>(i);
    if (flt) {
      // An empty mean is 0/0 = NaN, as ops.def says.
      out.setF(i, fold == Fold::Mean ? accF[o] / static_cast<double>(p.count) : accF[o]);
    } else {
      int64_t v = accI[o];
      if (fold == Fold::Mean) v = p.count == 0 ? 0 : v / p.count;
      out.setI(i, v);
    }
  }
  return std::vector<HostTensor>{out};
}

// A tensor viewed as outer x n x inner around one axis.
struct AxisView {
  int64_t axis, outer = 1, n, inner = 1;
  int64_t at(int64_t o, int64_t j, int64_t in) const { return (o * n + j) * inner + in; }
};

Result<AxisView> axisView(const KernelCtx& c, const std::vector<int64_t>& shape) {
  KILN_TRY(int64_t axis,
           normAxis(c, c.op.attrs().getInt("axis", 0), static_cast<int64_t>(shape.size())));
  AxisView v{axis, 1, shape[static_cast<size_t>(axis)], 1};
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) v.inner *= shape[d];
  return v;
}

KernelResult argExtreme(const KernelCtx& c, bool isMax) {
  const HostTensor& x = c.in[0];
  KILN_TRY(AxisView v, axisView(c, x.shape()));
  if (v.n == 0) return opError(c, "axis " + std::to_string(v.axis) + " is empty");
  bool last = c.op.attrs().getInt("select_last_index", 0) != 0;
  std::vector<int64_t> shape = x.shape();
  if (c.op.attrs().getInt("keepdims", 1))
    shape[static_cast<size_t>(v.axis)] = 1;
  else
    shape.erase(shape.begin() + v.axis);
  KILN_TRY(HostTensor out, newTensor(c, ElemType::I64, shape));
  bool flt = isFloat(x.elem());
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      int64_t best = 0;
      for (int64_t j = 1; j < v.n; ++j) {
        int64_t bi = v.at(o, best, in), ji = v.at(o, j, in);
        if (flt) {
          double b = x.getF(bi), y = x.getF(ji);
          if (std::isnan(b)) break; // the first NaN wins
          if (std::isnan(y) || (isMax ? y > b : y < b) || (last && y == b)) best = j;
        } else {
          int64_t b = x.getI(bi), y = x.getI(ji);
          if ((isMax ? y > b : y < b) || (last && y == b)) best = j;
        }
      }
      out.setI(o * v.inner + in, best);
    }
  }
  return std::vector<HostTensor>{out};
}

KernelResult softmax(const KernelCtx& c, bool log) {
  const HostTensor& x = c.in[0];
  KILN_TRY(AxisView v, axisView(c, x.shape()));
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), x.shape()));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      double m = -INFINITY;
      for (int64_t j = 0; j < v.n; ++j) m = fmaxNan(m, x.getF(v.at(o, j, in)));
      // With m = -inf every x - m is NaN (-inf - -inf), so an all -inf row gives NaN.
      double sum = 0;
      for (int64_t j = 0; j < v.n; ++j) sum += std::exp(x.getF(v.at(o, j, in)) - m);
      for (int64_t j = 0; j < v.n; ++j) {
        int64_t k = v.at(o, j, in);
        double d = x.getF(k) - m;
        out.setF(k, log ? d - std::log(sum) : std::exp(d) / sum);
      }
    }
  }
  return std::vector<HostTensor>{out};
}

} // namespace

KernelResult kernelReduceSum(const KernelCtx& c) { return reduce(c, Fold::Sum); }
KernelResult kernelReduceMean(const KernelCtx& c) { return reduce(c, Fold::Mean); }
KernelResult kernelReduceMax(const KernelCtx& c) { return reduce(c, Fold::Max); }
KernelResult kernelReduceMin(const KernelCtx& c) { return reduce(c, Fold::Min); }
KernelResult kernelReduceProd(const KernelCtx& c) { return reduce(c, Fold::Prod); }
KernelResult kernelArgMax(const KernelCtx& c) { return argExtreme(c, true); }
KernelResult kernelArgMin(const KernelCtx& c) { return argExtreme(c, false); }
KernelResult kernelSoftmax(const KernelCtx& c) { return softmax(c, false); }
KernelResult kernelLogSoftmax(const KernelCtx& c) { return softmax(c, true); }

KernelResult kernelTopK(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  KILN_TRY(AxisView v, axisView(c, x.shape()));
  int64_t k = c.op.attrs().getInt("k");
  bool largest = c.op.attrs().getInt("largest", 1) != 0;
  if (k < 0 || k > v.n)
    return opError(c, "k = " + std::to_string(k) + " is out of range for a dim of " +
                          std::to_string(v.n));
  std::vector<int64_t> shape = x.shape();
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), x.rank()));
  shape[static_cast<size_t>(axis)] = k;
  KILN_TRY(HostTensor vals, newTensor(c, x.elem(), shape));
  KILN_TRY(HostTensor idxs, newTensor(c, ElemType::I64, shape));
  bool flt = isFloat(x.elem());
  // Strict order "a comes before b"; NaN is larger than every number.
  auto before = [&](int64_t a, int64_t b) {
    if (flt) {
      double xa = x.getF(a), xb = x.getF(b);
      bool na = std::isnan(xa), nb = std::isnan(xb);
      if (na || nb) return largest ? (na && !nb) : (!na && nb);
      return largest ? xa > xb : xa < xb;
    }
    int64_t xa = x.getI(a), xb = x.getI(b);
    return largest ? xa > xb : xa < xb;
  };
  std::vector<int64_t> order(static_cast<size_t>(v.n));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      for (int64_t j = 0; j < v.n; ++j) order[static_cast<size_t>(j)] = j;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        int64_t ea = v.at(o, a, in), eb = v.at(o, b, in);
        return before(ea, eb) || (!before(eb, ea) && a < b);
      });
      for (int64_t j = 0; j < k; ++j) {
        int64_t src = v.at(o, order[static_cast<size_t>(j)], in);
        int64_t dst = (o * k + j) * v.inner + in;
        copyElem(vals, dst, x, src);
        idxs.setI(dst, order[static_cast<size_t>(j)]);
      }
    }
  }
  return std::vector<HostTensor>{vals, idxs};
}

KernelResult kernelCumsum(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  KILN_TRY(AxisView v, axisView(c, x.shape()));
  bool exclusive = c.op.attrs().getInt("exclusive", 0) != 0;
  bool reverse = c.op.attrs().getInt("reverse", 0) != 0;
  bool flt = isFloat(x.elem());
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), x.shape()));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      double sumF = 0;
      int64_t sumI = 0;
      for (int64_t step = 0; step < v.n; ++step) {
        int64_t k = v.at(o, reverse ? v.n - 1 - step : step, in);
        if (flt) {
          if (!exclusive) sumF += x.getF(k);
          out.setF(k, sumF);
          if (exclusive) sumF += x.getF(k);
        } else {
          if (!exclusive) sumI = wrapAdd(sumI, x.getI(k));
          out.setI(k, sumI);
          if (exclusive) sumI = wrapAdd(sumI, x.getI(k));
        }
      }
    }
  }
  return std::vector<HostTensor>{out};
}

} // namespace kiln::interp
