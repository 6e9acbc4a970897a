// Interpreter kernel for `attention`: softmax(scale * q.kT + mask) . v per (batch, query
// head, query row), in f64 like matmul and softmax, with grouped kv heads read in place and
// causally hidden keys skipped (they would weigh exp(-inf) = 0).
#include <cmath>

#include "ir/interp/kernels.h"

namespace kiln::interp {

KernelResult kernelAttention(const KernelCtx& c) {
  KILN_CHECK(expectSameElem(c));
  const HostTensor &q = c.in[0], &k = c.in[1], &v = c.in[2];
  const HostTensor* mask = c.in.size() == 4 ? &c.in[3] : nullptr;
  size_t r = q.shape().size();
  if (r < 3 || k.shape().size() != r || v.shape().size() != r)
    return opError(c, "q, k and v must have one rank >= 3");
  int64_t batch = 1;
  for (size_t d = 0; d + 3 < r; ++d) {
    if (k.shape()[d] != q.shape()[d] || v.shape()[d] != q.shape()[d])
      return opError(c, "batch dims differ between q " + shapeStr(q.shape()) + ", k " +
                            shapeStr(k.shape()) + " and v " + shapeStr(v.shape()));
    batch *= q.shape()[d];
  }
  int64_t hq = q.shape()[r - 3], sq = q.shape()[r - 2], dk = q.shape()[r - 1];
  int64_t hk = k.shape()[r - 3], sk = k.shape()[r - 2], dv = v.shape()[r - 1];
  if (hk < 1 || hq % hk != 0 || v.shape()[r - 3] != hk || k.shape()[r - 1] != dk ||
      v.shape()[r - 2] != sk)
    return opError(c, "q " + shapeStr(q.shape()) + ", k " + shapeStr(k.shape()) + " and v " +
                          shapeStr(v.shape()) + " do not make attention heads");
  std::vector<int64_t> scores(q.shape().begin(), q.shape().end() - 1);
  scores.push_back(sk);
  std::vector<int64_t> maskStrides;
  if (mask) {
    KILN_TRY(std::vector<int64_t> b, broadcastShapes(c, {scores, mask->shape()}));
    if (b != scores)
      return opError(c, "the mask " + shapeStr(mask->shape()) + " does not broadcast to " +
                            shapeStr(scores));
    maskStrides = broadcastStrides(mask->shape(), scores);
  }
  std::vector<int64_t> outShape(q.shape().begin(), q.shape().end() - 1);
  outShape.push_back(dv);
  KILN_TRY(HostTensor out, newTensor(c, q.elem(), outShape));
  double scale = c.op.attrs().getFloat("scale");
  bool causal = c.op.attrs().getInt("causal") != 0;
  int64_t group = hq / hk;
  std::vector<double> s(static_cast<size_t>(sk)), acc(static_cast<size_t>(dv));
  std::vector<int64_t> idx;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      int64_t kvBase = (b * hk + h / group) * sk;
      for (int64_t i = 0; i < sq; ++i) {
        int64_t row = (b * hq + h) * sq + i;
        // Keys [0, visible) are seen: all of them, or up to the query's causal position.
        int64_t visible = causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
        double m = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < dk; ++d)
            dot += q.getF(row * dk + d) * k.getF((kvBase + j) * dk + d);
          double x = scale * dot;
          if (mask) {
            unravel(row * sk + j, scores, idx);
            x += mask->getF(interp::dot(idx, maskStrides));
          }
          s[static_cast<size_t>(j)] = x;
          m = fmaxNan(m, x);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j)
          sum += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
        std::fill(acc.begin(), acc.end(), visible == 0 ? NAN : 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          double p = s[static_cast<size_t>(j)] / sum;
          for (int64_t d = 0; d < dv; ++d)
            acc[static_cast<size_t>(d)] += p * v.getF((kvBase + j) * dv + d);
        }
        for (int64_t d = 0; d < dv; ++d) out.setF(row * dv + d, acc[static_cast<size_t>(d)]);
      }
    }
  return std::vector<HostTensor>{out};
}

} // namespace kiln::interp
