// Kernels of the ops whose result shape depends on the operand's values (kDataShaped):
// nonzero, unique, non_max_suppression. The interpreter's driver binds the data-dependent
// symbol of each result type to the size produced here (interp.cpp, bindDataSymbols).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ir/interp/kernels.h"

namespace kiln::interp {

namespace {

// Three-way comparison of elements a and b of x: NaN after every number and equal to NaN;
// u64 compares unsigned.
int compareElems(const HostTensor& x, int64_t a, int64_t b) {
  if (isFloat(x.elem())) {
    double xa = x.getF(a), xb = x.getF(b);
    bool na = std::isnan(xa), nb = std::isnan(xb);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
    return xa < xb ? -1 : (xa > xb ? 1 : 0);
  }
  if (x.elem() == ElemType::U64) {
    auto ua = static_cast<uint64_t>(x.getI(a)), ub = static_cast<uint64_t>(x.getI(b));
    return ua < ub ? -1 : (ua > ub ? 1 : 0);
  }
  int64_t ia = x.getI(a), ib = x.getI(b);
  return ia < ib ? -1 : (ia > ib ? 1 : 0);
}

// One element of a tensor given as a 1-element operand (a scalar or shape [1]).
Result<double> scalarOf(const KernelCtx& c, size_t i, const char* what) {
  const HostTensor& t = c.in[i];
  if (t.numElements() != 1)
    return opError(c, std::string(what) + " (operand " + std::to_string(i) +
                          ") must hold one element, got shape " + shapeStr(t.shape()));
  return isFloat(t.elem()) ? t.getF(0) : static_cast<double>(t.getI(0));
}

} // namespace

KernelResult kernelNonZero(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  std::vector<int64_t> hits;
  bool flt = isFloat(x.elem());
  for (int64_t i = 0; i < x.numElements(); ++i)
    if (flt ? x.getF(i) != 0.0 : x.getI(i) != 0) hits.push_back(i);
  auto n = static_cast<int64_t>(hits.size());
  KILN_TRY(HostTensor out, newTensor(c, ElemType::I64, {x.rank(), n}));
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < n; ++j) {
    unravel(hits[static_cast<size_t>(j)], x.shape(), idx);
    for (int64_t d = 0; d < x.rank(); ++d) out.setI(d * n + j, idx[static_cast<size_t>(d)]);
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelUnique(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  bool sorted = c.op.attrs().getInt("sorted") != 0;
  // Slices along the axis: outer x n x inner; without an axis, n elements of one each.
  int64_t outer = 1, n = x.numElements(), inner = 1, axis = -1;
  if (c.op.attrs().has("axis")) {
    KILN_TRY(axis, normAxis(c, c.op.attrs().getInt("axis"), x.rank()));
    n = x.shape()[static_cast<size_t>(axis)];
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[static_cast<size_t>(d)];
  }
  auto at = [&](int64_t o, int64_t s, int64_t i) { return (o * n + s) * inner + i; };
  // Slices compare lexicographically in (outer, inner) order, as numpy flattens them.
  auto compare = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        if (int r = compareElems(x, at(o, a, i), at(o, b, i))) return r;
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
  // Groups of equal slices in sorted order; each group's first member is its first occurrence.
  std::vector<int64_t> first, counts, groupOf(static_cast<size_t>(n));
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || compare(order[k - 1], order[k]) != 0) {
      first.push_back(order[k]);
      counts.push_back(0);
    }
    ++counts.back();
    groupOf[static_cast<size_t>(order[k])] = static_cast<int64_t>(first.size()) - 1;
  }
  // y's order: ascending, or by first occurrence.
  std::vector<int64_t> groups(first.size());
  std::iota(groups.begin(), groups.end(), 0);
  if (!sorted)
    std::sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) {
      return first[static_cast<size_t>(a)] < first[static_cast<size_t>(b)];
    });
  std::vector<int64_t> position(groups.size());
  for (size_t k = 0; k < groups.size(); ++k)
    position[static_cast<size_t>(groups[k])] = static_cast<int64_t>(k);
  auto u = static_cast<int64_t>(groups.size());
  std::vector<int64_t> yShape = {u};
  if (axis >= 0) {
    yShape = x.shape();
    yShape[static_cast<size_t>(axis)] = u;
  }
  KILN_TRY(HostTensor y, newTensor(c, x.elem(), yShape));
  KILN_TRY(HostTensor indices, newTensor(c, ElemType::I64, {u}));
  KILN_TRY(HostTensor inverse, newTensor(c, ElemType::I64, {n}));
  KILN_TRY(HostTensor count, newTensor(c, ElemType::I64, {u}));
  for (int64_t k = 0; k < u; ++k) {
    auto g = static_cast<size_t>(groups[static_cast<size_t>(k)]);
    indices.setI(k, first[g]);
    count.setI(k, counts[g]);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        copyElem(y, (o * u + k) * inner + i, x, at(o, first[g], i));
  }
  for (int64_t s = 0; s < n; ++s)
    inverse.setI(s, position[static_cast<size_t>(groupOf[static_cast<size_t>(s)])]);
  return std::vector<HostTensor>{y, indices, inverse, count};
}

KernelResult kernelNonMaxSuppression(const KernelCtx& c) {
  const HostTensor &boxes = c.in[0], &scores = c.in[1];
  if (!isFloat(boxes.elem()) || !isFloat(scores.elem()))
    return opError(c, "boxes and scores must have a floating-point element type");
  if (boxes.rank() != 3 || boxes.shape()[2] != 4 || scores.rank() != 3 ||
      scores.shape()[0] != boxes.shape()[0] || scores.shape()[2] != boxes.shape()[1])
    return opError(c, "boxes " + shapeStr(boxes.shape()) + " and scores " +
                          shapeStr(scores.shape()) + " are not [B, N, 4] and [B, C, N]");
  KILN_TRY(double maxOut, scalarOf(c, 2, "the maximum of boxes per class"));
  KILN_TRY(double iouThreshold, scalarOf(c, 3, "the iou threshold"));
  KILN_TRY(double scoreThreshold, scalarOf(c, 4, "the score threshold"));
  bool center = c.op.attrs().getInt("center_point_box") != 0;
  int64_t batches = boxes.shape()[0], n = boxes.shape()[1], classes = scores.shape()[1];
  int64_t limit = maxOut <= 0 ? 0 : static_cast<int64_t>(std::min<double>(maxOut, double(n)));
  // Box j of batch b as (min y, min x, max y, max x).
  auto corners = [&](int64_t b, int64_t j) {
    std::array<double, 4> v;
    for (int64_t k = 0; k < 4; ++k) v[static_cast<size_t>(k)] = boxes.getF((b * n + j) * 4 + k);
    if (center) // [x center, y center, width, height]
      return std::array<double, 4>{v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2,
                                   v[0] + v[2] / 2};
    return std::array<double, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]),
                                 std::max(v[1], v[3])};
  };
  auto overlapsTooMuch = [&](const std::array<double, 4>& a, const std::array<double, 4>& b) {
    double h = std::min(a[2], b[2]) - std::max(a[0], b[0]);
    double w = std::min(a[3], b[3]) - std::max(a[1], b[1]);
    if (h <= 0 || w <= 0) return false;
    double inter = h * w;
    double areaA = (a[2] - a[0]) * (a[3] - a[1]), areaB = (b[2] - b[0]) * (b[3] - b[1]);
    if (areaA <= 0 || areaB <= 0) return false;
    return inter / (areaA + areaB - inter) > iouThreshold;
  };
  std::vector<std::array<int64_t, 3>> selected;
  std::vector<int64_t> order;
  std::vector<std::array<double, 4>> kept;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t k = 0; k < classes && limit > 0; ++k) {
      auto score = [&](int64_t j) { return scores.getF((b * classes + k) * n + j); };
      order.clear();
      for (int64_t j = 0; j < n; ++j)
        if (score(j) > scoreThreshold) order.push_back(j);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t p, int64_t q) { return score(p) > score(q); });
      kept.clear();
      for (int64_t j : order) {
        std::array<double, 4> box = corners(b, j);
        bool suppressed = false;
        for (const auto& s : kept) suppressed = suppressed || overlapsTooMuch(s, box);
        if (suppressed) continue;
        kept.push_back(box);
        selected.push_back({b, k, j});
        if (static_cast<int64_t>(kept.size()) >= limit) break;
      }
    }
  auto count = static_cast<int64_t>(selected.size());
  KILN_TRY(HostTensor out, newTensor(c, ElemType::I64, {count, 3}));
  for (int64_t r = 0; r < count; ++r)
    for (int64_t k = 0; k < 3; ++k)
      out.setI(r * 3 + k, selected[static_cast<size_t>(r)][static_cast<size_t>(k)]);
  return std::vector<HostTensor>{out};
}

} // namespace kiln::interp
