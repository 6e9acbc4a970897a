// Converters for ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose (as a
// convolution over the stride-dilated input with flipped weights), pools, the
// normalizations (as reductions and elementwise ops), Softmax/LogSoftmax/Hardmax.
#include <limits>

#include "frontends/onnx/context.h"
#include "frontends/onnx/shape_values.h"

namespace kiln::onnx {

namespace {

Attrs axesAttrs(const std::vector<int64_t>& axes, bool keep) {
  Attrs a;
  a.set("axes", axes);
  a.set("keepdims", keep ? int64_t(1) : int64_t(0));
  return a;
}

Result<Val> transpose(Ctx& c, const Val& x, const std::vector<int64_t>& perm) {
  Attrs a;
  a.set("perm", perm);
  return c.op(OpKind::Transpose, {x}, std::move(a));
}

Status matmulOp(Ctx& c) {
  KILN_TRY(Val a, c.input(0));
  KILN_TRY(Val b, c.input(1));
  KILN_TRY(Val y, c.op(OpKind::Matmul, {a, b}));
  c.setOutput(0, y);
  return ok();
}

Status gemmOp(Ctx& c) {
  KILN_TRY(Val a, c.input(0));
  KILN_TRY(Val b, c.input(1));
  KILN_TRY(double alpha, c.attrFloat("alpha", 1.0));
  KILN_TRY(double beta, c.attrFloat("beta", 1.0));
  KILN_TRY(int64_t ta, c.attrInt("transA", 0));
  KILN_TRY(int64_t tb, c.attrInt("transB", 0));
  if (a.rank() != 2 || b.rank() != 2) return c.err("A and B must be 2-D");
  if (ta) {
    KILN_TRY(a, transpose(c, a, {1, 0}));
  }
  if (tb) {
    KILN_TRY(b, transpose(c, b, {1, 0}));
  }
  KILN_TRY(Val y, c.op(OpKind::Matmul, {a, b}));
  if (alpha != 1) {
    KILN_TRY(y, c.op(OpKind::Mul, {y, c.scalar(y.elem(), alpha)}));
  }
  if (c.hasInput(2)) {
    KILN_TRY(Val bias, c.input(2));
    if (beta != 1) {
      KILN_TRY(bias, c.op(OpKind::Mul, {bias, c.scalar(bias.elem(), beta)}));
    }
    KILN_TRY(y, c.op(OpKind::Add, {y, bias}));
  }
  c.setOutput(0, y);
  return ok();
}

// Window attributes shared by Conv and the pools, with auto_pad resolved.
struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
};

Result<Window> window(Ctx& c, const Val& x, std::vector<int64_t> kernel) {
  size_t s = static_cast<size_t>(x.rank() - 2);
  Window w;
  w.kernel = std::move(kernel);
  KILN_TRY(w.strides, c.attrInts("strides", std::vector<int64_t>(s, 1)));
  KILN_TRY(w.dilations, c.attrInts("dilations", std::vector<int64_t>(s, 1)));
  KILN_TRY(w.pads, c.attrInts("pads", std::vector<int64_t>(2 * s, 0)));
  KILN_TRY(std::string autoPad, c.attrStr("auto_pad", "NOTSET"));
  if (w.kernel.size() != s || w.strides.size() != s || w.dilations.size() != s ||
      w.pads.size() != 2 * s)
    return c.err("kernel_shape, strides, dilations or pads do not match the spatial rank " +
                 std::to_string(s));
  if (autoPad == "VALID") {
    w.pads.assign(2 * s, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < s; ++i) {
      const Dim& d = x.type().dim(static_cast<int64_t>(i + 2));
      if (!d.isStatic()) return c.err("auto_pad on a symbolic spatial dim is not supported");
      int64_t in = d.value(), st = w.strides[i];
      int64_t out = (in + st - 1) / st;
      int64_t total =
          std::max<int64_t>(0, (out - 1) * st + (w.kernel[i] - 1) * w.dilations[i] + 1 - in);
      int64_t small = total / 2, big = total - small;
      w.pads[i] = autoPad == "SAME_UPPER" ? small : big;
      w.pads[i + s] = autoPad == "SAME_UPPER" ? big : small;
    }
  } else if (autoPad != "NOTSET") {
    return c.err("auto_pad \"" + autoPad + "\" is not supported");
  }
  return w;
}

Result<std::vector<int64_t>> kernelShape(Ctx& c, const Val& w) {
  std::vector<int64_t> k;
  for (int64_t i = 2; i < w.rank(); ++i) {
    const Dim& d = w.type().dim(i);
    if (!d.isStatic()) return c.err("the kernel's spatial dims must be static");
    k.push_back(d.value());
  }
  KILN_TRY(auto attr, c.attrInts("kernel_shape", k));
  return attr;
}

} // namespace

Result<Attrs> convAttrs(Ctx& c, const Val& x, const Val& w) {
  if (x.rank() < 3 || w.rank() != x.rank()) return c.err("X and W must have equal rank >= 3");
  KILN_TRY(auto k, kernelShape(c, w));
  KILN_TRY(Window win, window(c, x, k));
  KILN_TRY(int64_t group, c.attrInt("group", 1));
  Attrs a;
  a.set("strides", win.strides);
  a.set("pads", win.pads);
  a.set("dilations", win.dilations);
  a.set("group", group);
  return a;
}

namespace {

// A kiln conv of x and w with the node's optional bias (input 2) as the node's output.
Status emitConv(Ctx& c, const Val& x, const Val& w, Attrs a) {
  std::vector<Val> ops{x, w};
  if (c.hasInput(2)) {
    KILN_TRY(Val b, c.input(2));
    ops.push_back(b);
  }
  KILN_TRY(Val y, c.op(OpKind::Conv, ops, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

Status convOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val w, c.input(1));
  KILN_TRY(Attrs a, convAttrs(c, x, w));
  return emitConv(c, x, w, std::move(a));
}

// ConvTranspose = conv(stride-dilated, padded x, flipped and transposed w): each input
// element is followed by stride-1 zeros, the border is padded by dilation*(k-1) minus the
// ONNX pads, and the convolution runs with stride 1.
Status convTransposeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val w, c.input(1));
  if (x.rank() < 3 || w.rank() != x.rank()) return c.err("X and W must have equal rank >= 3");
  size_t s = static_cast<size_t>(x.rank() - 2);
  KILN_TRY(auto k, kernelShape(c, w));
  KILN_TRY(auto strides, c.attrInts("strides", std::vector<int64_t>(s, 1)));
  KILN_TRY(auto dil, c.attrInts("dilations", std::vector<int64_t>(s, 1)));
  KILN_TRY(auto pads, c.attrInts("pads", std::vector<int64_t>(2 * s, 0)));
  KILN_TRY(auto outPad, c.attrInts("output_padding", std::vector<int64_t>(s, 0)));
  KILN_TRY(auto outShape, c.attrInts("output_shape"));
  KILN_TRY(std::string autoPad, c.attrStr("auto_pad", "NOTSET"));
  KILN_TRY(int64_t group, c.attrInt("group", 1));
  if (k.size() != s || strides.size() != s || dil.size() != s || pads.size() != 2 * s ||
      outPad.size() != s)
    return c.err("kernel_shape, strides, dilations, pads or output_padding do not match the "
                 "spatial rank");
  std::vector<int64_t> in;
  for (size_t i = 0; i < s; ++i) {
    const Dim& d = x.type().dim(static_cast<int64_t>(i + 2));
    if (!d.isStatic()) return c.err("ConvTranspose over symbolic spatial dims is not supported");
    in.push_back(d.value());
  }
  if (!outShape.empty() || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    if (outShape.size() > s)
      outShape.erase(outShape.begin(), outShape.end() - static_cast<long>(s));
    for (size_t i = 0; i < s; ++i) {
      int64_t target = outShape.empty() ? in[i] * strides[i] : outShape[i];
      int64_t total = strides[i] * (in[i] - 1) + outPad[i] + (k[i] - 1) * dil[i] + 1 - target;
      // Python's floor division, as in the ONNX reference (total may be negative).
      int64_t half = (total - (total < 0 ? 1 : 0)) / 2;
      bool upper = autoPad == "SAME_UPPER";
      pads[i] = upper ? half : total - half;
      pads[i + s] = upper ? total - half : half;
    }
  } else if (autoPad == "VALID") {
    pads.assign(2 * s, 0);
  }
  // x with stride-1 zeros after each element: [N, C, d0, 1, d1, 1, ...] padded to
  // [N, C, d0, s0, d1, s1, ...], reshaped to [N, C, d0*s0, ...].
  Shape xd = x.type().shape();
  Shape split{xd[0], xd[1]}, merged{xd[0], xd[1]};
  std::vector<int64_t> zpads(2 * (2 + 2 * s), 0);
  for (size_t i = 0; i < s; ++i) {
    split.push_back(Dim(in[i]));
    split.push_back(Dim(1));
    merged.push_back(Dim(in[i] * strides[i]));
    zpads[2 + 2 * s + 2 + 2 * i + 1] = strides[i] - 1;
  }
  KILN_TRY(Val xs, reshapeTo(c, x, split));
  Attrs za;
  za.set("pads", zpads);
  za.set("mode", std::string("constant"));
  za.set("value", 0.0);
  if (std::any_of(strides.begin(), strides.end(), [](int64_t v) { return v != 1; })) {
    KILN_TRY(xs, c.op(OpKind::Pad, {xs}, std::move(za)));
  }
  KILN_TRY(xs, reshapeTo(c, xs, merged));
  std::vector<int64_t> bpads(2 * (2 + s), 0);
  for (size_t i = 0; i < s; ++i) {
    int64_t edge = dil[i] * (k[i] - 1);
    bpads[2 + i] = edge - pads[i];
    bpads[2 + s + 2 + i] = edge - pads[i + s] + outPad[i] - (strides[i] - 1);
  }
  Attrs pa;
  pa.set("pads", bpads);
  pa.set("mode", std::string("constant"));
  pa.set("value", 0.0);
  KILN_TRY(xs, c.op(OpKind::Pad, {xs}, std::move(pa)));

  // w: [Cin, Cout/g, k...] flipped spatially, regrouped to [Cout, Cin/g, k...].
  std::vector<int64_t> starts, ends, axes, steps;
  for (size_t i = 0; i < s; ++i) {
    starts.push_back(-1);
    ends.push_back(std::numeric_limits<int64_t>::min());
    axes.push_back(static_cast<int64_t>(i + 2));
    steps.push_back(-1);
  }
  Attrs sa;
  sa.set("starts", starts);
  sa.set("ends", ends);
  sa.set("axes", axes);
  sa.set("steps", steps);
  KILN_TRY(Val wf, c.op(OpKind::Slice, {w}, std::move(sa)));
  const Dim &cinD = w.type().dim(0), &coutgD = w.type().dim(1);
  if (!cinD.isStatic() || !coutgD.isStatic()) return c.err("W's channel dims must be static");
  int64_t cin = cinD.value(), coutg = coutgD.value();
  if (group <= 0 || cin % group != 0) return c.err("group does not divide the input channels");
  Shape g5{Dim(group), Dim(cin / group), Dim(coutg)};
  Shape g3{Dim(coutg * group), Dim(cin / group)};
  std::vector<int64_t> perm{0, 2, 1};
  for (size_t i = 0; i < s; ++i) {
    g5.push_back(Dim(k[i]));
    g3.push_back(Dim(k[i]));
    perm.push_back(static_cast<int64_t>(i + 3));
  }
  KILN_TRY(wf, reshapeTo(c, wf, g5));
  KILN_TRY(wf, transpose(c, wf, perm));
  KILN_TRY(wf, reshapeTo(c, wf, g3));
  Attrs a;
  a.set("strides", std::vector<int64_t>(s, 1));
  a.set("pads", std::vector<int64_t>(2 * s, 0));
  a.set("dilations", dil);
  a.set("group", group);
  return emitConv(c, xs, wf, std::move(a));
}

// MaxPool's Indices: for each window offset t (in row-major order) the input elements it
// reads, as a strided slice of the input padded with the lowest value; the index of the
// first offset whose element equals the max wins. Indices count over the whole input
// (n, c and the spatial position, row-major or, with storage_order=1, column-major).
Result<Val> maxPoolIndices(Ctx& c, const Val& x, const Val& y, const Window& w) {
  auto s = static_cast<size_t>(x.rank() - 2);
  KILN_TRY(int64_t order, c.attrInt("storage_order", 0));
  std::vector<int64_t> in, out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const Dim &di = x.type().dim(i), &dout = y.type().dim(i);
    if (!di.isStatic() || !dout.isStatic()) return c.err("Indices need static dims");
    in.push_back(di.value());
    out.push_back(dout.value());
  }
  int64_t taps = 1;
  for (int64_t k : w.kernel) taps *= k;
  if (taps > 1024) return c.err("Indices of a window of more than 1024 elements");
  // Padding: the window's begin pads, and at the end whatever the last window reaches.
  std::vector<int64_t> pads(2 * (s + 2), 0);
  for (size_t i = 0; i < s; ++i) {
    pads[2 + i] = w.pads[i];
    int64_t reach = (out[i + 2] - 1) * w.strides[i] + (w.kernel[i] - 1) * w.dilations[i] + 1;
    pads[s + 4 + i] = std::max<int64_t>(0, reach - in[i + 2] - w.pads[i]);
  }
  Attrs pa;
  pa.set("pads", pads);
  pa.set("mode", std::string("constant"));
  pa.set("value", isFloat(x.elem()) ? -std::numeric_limits<double>::infinity()
                                    : static_cast<double>(intLowest(x.elem())));
  KILN_TRY(Val xp, c.op(OpKind::Pad, {x}, std::move(pa)));
  // Spatial strides of the flat index.
  std::vector<int64_t> stride(s, 1);
  int64_t plane = 1;
  for (size_t i = 0; i < s; ++i) plane *= in[i + 2];
  for (size_t i = 0; i < s; ++i)
    for (size_t j = 0; j < s; ++j)
      if (order ? j < i : j > i) stride[i] *= in[j + 2];
  std::vector<int64_t> outSpatial(out.begin() + 2, out.end());
  int64_t outPlane = 1;
  for (int64_t d : outSpatial) outPlane *= d;
  std::vector<int64_t> t(s, 0);
  std::vector<std::pair<Val, Val>> cands; // (elements, spatial index) per offset
  for (int64_t n = 0; n < taps; ++n) {
    int64_t r = n;
    for (size_t i = s; i-- > 0;) t[i] = r % w.kernel[i], r /= w.kernel[i];
    std::vector<int64_t> starts, ends, axes, steps;
    for (size_t i = 0; i < s; ++i) {
      starts.push_back(t[i] * w.dilations[i]);
      ends.push_back(starts.back() + (out[i + 2] - 1) * w.strides[i] + 1);
      axes.push_back(static_cast<int64_t>(i + 2));
      steps.push_back(w.strides[i]);
    }
    Attrs sa;
    sa.set("starts", starts);
    sa.set("ends", ends);
    sa.set("axes", axes);
    sa.set("steps", steps);
    KILN_TRY(Val xs, c.op(OpKind::Slice, {xp}, std::move(sa)));
    HostTensor table(ElemType::I64, outSpatial);
    for (int64_t o = 0; o < outPlane; ++o) {
      int64_t rest = o, flat = 0;
      for (size_t i = s; i-- > 0;) {
        int64_t oi = rest % outSpatial[i];
        rest /= outSpatial[i];
        flat += (oi * w.strides[i] - w.pads[i] + t[i] * w.dilations[i]) * stride[i];
      }
      table.setI(o, flat);
    }
    cands.emplace_back(xs, c.constant(table));
  }
  // The first offset that holds the max wins: select from the last one back.
  Val idx = cands.back().second;
  for (size_t k = cands.size() - 1; k-- > 0;) {
    KILN_TRY(Val hit, c.op(OpKind::Eq, {cands[k].first, y}));
    KILN_TRY(idx, c.op(OpKind::Select, {hit, cands[k].second, idx}));
  }
  // Plus (n * C + c) * plane.
  Shape nc{Dim(in[0]), Dim(in[1])};
  for (size_t i = 0; i < s; ++i) nc.push_back(Dim(1));
  Attrs a0, a1;
  a0.set("axis", int64_t(0));
  a1.set("axis", int64_t(1));
  KILN_TRY(Val n, c.op(OpKind::Iota, {}, std::move(a0), {Type(ElemType::I64, nc)}));
  KILN_TRY(Val ch, c.op(OpKind::Iota, {}, std::move(a1), {Type(ElemType::I64, nc)}));
  KILN_TRY(n, c.op(OpKind::Mul, {n, c.scalar(ElemType::I64, double(in[1]))}));
  KILN_TRY(n, c.op(OpKind::Add, {n, ch}));
  KILN_TRY(n, c.op(OpKind::Mul, {n, c.scalar(ElemType::I64, double(plane))}));
  return c.op(OpKind::Add, {idx, n});
}

Status poolOp(Ctx& c, bool isMax) {
  KILN_TRY(Val x, c.input(0));
  if (x.rank() < 3) return c.err("needs rank >= 3");
  bool indices = isMax && c.numOutputs() > 1 && !c.node().output(1).empty();
  KILN_TRY(auto k, c.attrInts("kernel_shape"));
  KILN_TRY(Window win, window(c, x, k));
  KILN_TRY(int64_t ceil, c.attrInt("ceil_mode", 0));
  Attrs a;
  a.set("kernel", win.kernel);
  a.set("strides", win.strides);
  a.set("pads", win.pads);
  a.set("ceil_mode", ceil);
  if (isMax) {
    a.set("dilations", win.dilations);
  } else {
    for (int64_t d : win.dilations)
      if (d != 1) return c.err("AveragePool with dilations is not supported");
    KILN_TRY(int64_t include, c.attrInt("count_include_pad", 0));
    a.set("count_include_pad", include);
  }
  KILN_TRY(Val y, c.op(isMax ? OpKind::MaxPool : OpKind::AvgPool, {x}, std::move(a)));
  c.setOutput(0, y);
  if (indices) {
    KILN_TRY(Val i, maxPoolIndices(c, x, y, win));
    c.setOutput(1, i);
  }
  return ok();
}

// MaxUnpool: the pooled values written at their flat indices (MaxPool's Indices) into a
// zero tensor of the unpooled shape, as one scatter_nd over the flattened output. The
// indices count in the shape the window attributes give; a larger output_shape pads that
// at the end of each spatial dim (as ONNX's test data expects).
Status maxUnpoolOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  if (x.rank() < 3) return c.err("needs rank >= 3");
  KILN_TRY(auto k, c.attrInts("kernel_shape"));
  KILN_TRY(Window win, window(c, x, k));
  auto s = static_cast<size_t>(x.rank() - 2);
  std::vector<int64_t> out, given;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const Dim& d = x.type().dim(i);
    if (!d.isStatic()) return c.err("MaxUnpool needs static dims");
    out.push_back(d.value());
  }
  for (size_t i = 0; i < s; ++i)
    out[i + 2] = (out[i + 2] - 1) * win.strides[i] - win.pads[i] - win.pads[i + s] + k[i];
  if (c.hasInput(2)) {
    KILN_TRY(given, c.constInts(2, "output_shape"));
    if (given.size() != static_cast<size_t>(x.rank()))
      return c.err("output_shape must have one entry per dim");
    for (size_t i = 0; i < given.size(); ++i)
      if (given[i] < out[i]) return c.err("output_shape is smaller than the unpooled shape");
  }
  int64_t total = 1;
  for (int64_t d : out) {
    if (d < 0 || d > (int64_t(1) << 31)) return c.err("the output shape is out of range");
    total *= d;
    if (total > (int64_t(1) << 31)) return c.err("the output shape is out of range");
  }
  SymExpr n = SymExpr::constant(1);
  for (int64_t i = 0; i < x.rank(); ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, x.type(), i));
    n = n * d;
  }
  Dim count(simplify(c, n));
  KILN_TRY(Val flatX, reshapeTo(c, x, {count}));
  KILN_TRY(idx, c.cast(idx, ElemType::I64));
  KILN_TRY(Val flatI, reshapeTo(c, idx, {count, Dim(1)}));
  KILN_TRY(Val zeros, broadcastTo(c, c.scalar(x.elem(), 0), {Dim(total)}));
  KILN_TRY(Val y, c.op(OpKind::ScatterNd, {zeros, flatI, flatX}));
  Shape os;
  for (int64_t d : out) os.push_back(Dim(d));
  KILN_TRY(y, reshapeTo(c, y, os));
  if (!given.empty() && given != out) {
    std::vector<int64_t> pads(2 * given.size(), 0);
    for (size_t i = 0; i < given.size(); ++i) pads[given.size() + i] = given[i] - out[i];
    Attrs pa;
    pa.set("pads", pads);
    pa.set("mode", std::string("constant"));
    pa.set("value", 0.0);
    KILN_TRY(y, c.op(OpKind::Pad, {y}, std::move(pa)));
  }
  c.setOutput(0, y);
  return ok();
}

Status gridSampleOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val grid, c.input(1));
  KILN_TRY(std::string mode, c.attrStr("mode", "bilinear"));
  KILN_TRY(std::string padding, c.attrStr("padding_mode", "zeros"));
  KILN_TRY(int64_t align, c.attrInt("align_corners", 0));
  if (mode == "linear") mode = "bilinear"; // the opset 20 names
  if (mode == "cubic") mode = "bicubic";
  KILN_TRY(grid, c.cast(grid, x.elem()));
  Attrs a;
  a.set("mode", mode);
  a.set("padding_mode", padding);
  a.set("align_corners", align);
  KILN_TRY(Val y, c.op(OpKind::GridSample, {x, grid}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

Status roiAlignOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val rois, c.input(1));
  KILN_TRY(Val idx, c.input(2));
  // Before opset 16 RoiAlign had no coordinate_transformation_mode and behaved as
  // output_half_pixel; from 16 the default is half_pixel.
  KILN_TRY(std::string coord, c.attrStr("coordinate_transformation_mode",
                                        c.opset() < 16 ? "output_half_pixel" : "half_pixel"));
  if (coord != "half_pixel" && coord != "output_half_pixel")
    return c.err("coordinate_transformation_mode must be half_pixel or output_half_pixel");
  Attrs a;
  KILN_TRY(std::string mode, c.attrStr("mode", "avg"));
  a.set("mode", mode);
  KILN_TRY(int64_t oh, c.attrInt("output_height", 1));
  KILN_TRY(int64_t ow, c.attrInt("output_width", 1));
  KILN_TRY(int64_t ratio, c.attrInt("sampling_ratio", 0));
  KILN_TRY(double scale, c.attrFloat("spatial_scale", 1.0));
  a.set("output_height", oh);
  a.set("output_width", ow);
  a.set("sampling_ratio", ratio);
  a.set("spatial_scale", scale);
  a.set("aligned", int64_t(coord == "half_pixel" ? 1 : 0));
  KILN_TRY(rois, c.cast(rois, x.elem()));
  KILN_TRY(idx, c.cast(idx, ElemType::I64));
  KILN_TRY(Val y, c.op(OpKind::RoiAlign, {x, rois, idx}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

Status globalPool(Ctx& c, OpKind k) {
  KILN_TRY(Val x, c.input(0));
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  KILN_TRY(Val y, c.op(k, {x}, axesAttrs(axes, true)));
  c.setOutput(0, y);
  return ok();
}

// A per-channel parameter [C] reshaped to [C, 1, ...] to broadcast against N x C x spatial.
Result<Val> perChannel(Ctx& c, const Val& p, int64_t rank) {
  if (p.rank() != 1) return c.err("per-channel parameters must be 1-D, got " + p.type().str());
  Shape s{p.type().dim(0)};
  for (int64_t i = 2; i < rank; ++i) s.push_back(Dim(1));
  return reshapeTo(c, p, s);
}

Status batchNormOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(double eps, c.attrFloat("epsilon", 1e-5));
  KILN_TRY(int64_t training, c.attrInt("training_mode", 0));
  KILN_TRY(int64_t spatial, c.attrInt("spatial", 1));
  if (!spatial) return c.err("spatial=0 is not supported");
  if (x.rank() < 2) return c.err("the input must have rank >= 2, got " + x.type().str());
  std::vector<Val> p;
  for (size_t i = 1; i <= 4; ++i) {
    KILN_TRY(Val v, c.input(i));
    if (v.rank() != 1) return c.err("scale, B, mean and var must be 1-D");
    KILN_TRY(v, perChannel(c, v, x.rank()));
    p.push_back(v);
  }
  if (training) {
    // Normalized with the batch's own statistics (the mean and the biased variance over
    // every axis but the channels); outputs 1 and 2 are the running mean and variance
    // updated with them: running * momentum + batch * (1 - momentum).
    KILN_TRY(double momentum, c.attrFloat("momentum", 0.9));
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < x.rank(); ++a)
      if (a != 1) axes.push_back(a);
    KILN_TRY(Val mean, c.op(OpKind::ReduceMean, {x}, axesAttrs(axes, true)));
    KILN_TRY(Val d, c.op(OpKind::Sub, {x, mean}));
    KILN_TRY(Val sq, c.op(OpKind::Mul, {d, d}));
    KILN_TRY(Val var, c.op(OpKind::ReduceMean, {sq}, axesAttrs(axes, true)));
    KILN_TRY(Val ve, c.op(OpKind::Add, {var, c.scalar(x.elem(), eps)}));
    KILN_TRY(Val rs, c.op(OpKind::Rsqrt, {ve}));
    KILN_TRY(Val f, c.op(OpKind::Mul, {p[0], rs}));
    KILN_TRY(Val y, c.op(OpKind::Mul, {d, f}));
    KILN_TRY(y, c.op(OpKind::Add, {y, p[1]}));
    c.setOutput(0, y);
    for (size_t k = 0; k < 2; ++k) {
      if (c.numOutputs() <= k + 1) break;
      KILN_TRY(Val running, c.input(k + 3));
      const Val& batch = k == 0 ? mean : var;
      KILN_TRY(Val flat, reshapeTo(c, batch, running.type().shape()));
      KILN_TRY(Val a, c.op(OpKind::Mul, {running, c.scalar(running.elem(), momentum)}));
      KILN_TRY(Val b, c.op(OpKind::Mul, {flat, c.scalar(flat.elem(), 1 - momentum)}));
      KILN_TRY(Val r, c.op(OpKind::Add, {a, b}));
      c.setOutput(k + 1, r);
    }
    return ok();
  }
  // y = (x - mean) * (scale / sqrt(var + eps)) + B
  KILN_TRY(Val var, c.op(OpKind::Add, {p[3], c.scalar(p[3].elem(), eps)}));
  KILN_TRY(Val rs, c.op(OpKind::Rsqrt, {var}));
  KILN_TRY(Val f, c.op(OpKind::Mul, {p[0], rs}));
  KILN_TRY(Val d, c.op(OpKind::Sub, {x, p[2]}));
  KILN_TRY(Val y, c.op(OpKind::Mul, {d, f}));
  KILN_TRY(y, c.op(OpKind::Add, {y, p[1]}));
  c.setOutput(0, y);
  return ok();
}

// (x - mean) / sqrt(var + eps) over `axes`, with the mean and 1/sqrt(var + eps) as well.
struct Normalized {
  Val y, mean, invStd;
};
Result<Normalized> normalize(Ctx& c, const Val& x, const std::vector<int64_t>& axes, double eps) {
  Normalized n;
  KILN_TRY(n.mean, c.op(OpKind::ReduceMean, {x}, axesAttrs(axes, true)));
  KILN_TRY(Val d, c.op(OpKind::Sub, {x, n.mean}));
  KILN_TRY(Val sq, c.op(OpKind::Mul, {d, d}));
  KILN_TRY(Val var, c.op(OpKind::ReduceMean, {sq}, axesAttrs(axes, true)));
  KILN_TRY(var, c.op(OpKind::Add, {var, c.scalar(x.elem(), eps)}));
  KILN_TRY(n.invStd, c.op(OpKind::Rsqrt, {var}));
  KILN_TRY(n.y, c.op(OpKind::Mul, {d, n.invStd}));
  return n;
}

Status instanceNormOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val scale, c.input(1));
  KILN_TRY(Val bias, c.input(2));
  KILN_TRY(double eps, c.attrFloat("epsilon", 1e-5));
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  KILN_TRY(Normalized n, normalize(c, x, axes, eps));
  KILN_TRY(scale, perChannel(c, scale, x.rank()));
  KILN_TRY(bias, perChannel(c, bias, x.rank()));
  KILN_TRY(Val y, c.op(OpKind::Mul, {n.y, scale}));
  KILN_TRY(y, c.op(OpKind::Add, {y, bias}));
  c.setOutput(0, y);
  return ok();
}

Status layerNormOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val scale, c.input(1));
  KILN_TRY(double eps, c.attrFloat("epsilon", 1e-5));
  KILN_TRY(int64_t axis, c.attrInt("axis", -1));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.rank(); ++i) axes.push_back(i);
  KILN_TRY(Normalized n, normalize(c, x, axes, eps));
  KILN_TRY(Val y, c.op(OpKind::Mul, {n.y, scale}));
  if (c.hasInput(2)) {
    KILN_TRY(Val bias, c.input(2));
    KILN_TRY(y, c.op(OpKind::Add, {y, bias}));
  }
  c.setOutput(0, y);
  c.setOutput(1, n.mean);
  c.setOutput(2, n.invStd);
  return ok();
}

// (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), the ONNX function body.
Status mvnOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(auto axes, c.attrInts("axes", {0, 2, 3}));
  for (int64_t& a : axes) {
    KILN_TRY(a, normAxis(c, a, x.rank()));
  }
  KILN_TRY(Val mean, c.op(OpKind::ReduceMean, {x}, axesAttrs(axes, true)));
  KILN_TRY(Val sq, c.op(OpKind::Mul, {x, x}));
  KILN_TRY(Val meanSq, c.op(OpKind::ReduceMean, {sq}, axesAttrs(axes, true)));
  KILN_TRY(Val m2, c.op(OpKind::Mul, {mean, mean}));
  KILN_TRY(Val var, c.op(OpKind::Sub, {meanSq, m2}));
  KILN_TRY(Val sd, c.op(OpKind::Sqrt, {var}));
  KILN_TRY(sd, c.op(OpKind::Add, {sd, c.scalar(x.elem(), 1e-9)}));
  KILN_TRY(Val d, c.op(OpKind::Sub, {x, mean}));
  KILN_TRY(Val y, c.op(OpKind::Div, {d, sd}));
  c.setOutput(0, y);
  return ok();
}

// Softmax-like ops: before opset 13 the input is viewed as 2-D [prod(d<axis), prod(d>=axis)]
// (default axis 1); from 13 the op runs along one axis (default -1).
enum class SoftKind { Softmax, LogSoftmax, Hardmax };

Result<Val> hardmax(Ctx& c, const Val& x, int64_t axis) {
  Attrs a;
  a.set("axis", axis);
  a.set("keepdims", int64_t(1));
  KILN_TRY(Val am, c.op(OpKind::ArgMax, {x}, std::move(a)));
  Attrs ia;
  ia.set("axis", axis);
  KILN_TRY(Val iota,
           c.op(OpKind::Iota, {}, std::move(ia), {Type(ElemType::I64, x.type().shape())}));
  KILN_TRY(Val eq, c.op(OpKind::Eq, {iota, am}));
  return c.cast(eq, x.elem());
}

Status softOp(Ctx& c, SoftKind kind) {
  KILN_TRY(Val x, c.input(0));
  bool legacy = c.opset() < 13;
  KILN_TRY(int64_t axis, c.attrInt("axis", legacy ? 1 : -1));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  Val in = x;
  int64_t runAxis = axis;
  if (legacy && x.rank() > 0) {
    SymExpr a = SymExpr::constant(1), b = SymExpr::constant(1);
    for (int64_t i = 0; i < x.rank(); ++i) {
      KILN_TRY(SymExpr d, dimExpr(c, x.type(), i));
      if (i < axis)
        a = a * d;
      else
        b = b * d;
    }
    KILN_TRY(in, reshapeTo(c, x, {Dim(simplify(c, a)), Dim(simplify(c, b))}));
    runAxis = 1;
  }
  Val y;
  if (kind == SoftKind::Hardmax) {
    KILN_TRY(y, hardmax(c, in, runAxis));
  } else {
    Attrs at;
    at.set("axis", runAxis);
    KILN_TRY(y, c.op(kind == SoftKind::Softmax ? OpKind::Softmax : OpKind::LogSoftmax, {in},
                     std::move(at)));
  }
  KILN_TRY(y, reshapeTo(c, y, x.type().shape()));
  c.setOutput(0, y);
  return ok();
}

} // namespace

void registerNn(Registry& r) {
  r["MatMul"] = {matmulOp};
  r["Gemm"] = {gemmOp};
  r["Conv"] = {convOp};
  r["ConvTranspose"] = {convTransposeOp};
  r["MaxPool"] = {[](Ctx& c) { return poolOp(c, true); }};
  r["MaxUnpool"] = {maxUnpoolOp};
  r["GridSample"] = {gridSampleOp};
  r["RoiAlign"] = {roiAlignOp};
  r["AveragePool"] = {[](Ctx& c) { return poolOp(c, false); }};
  r["GlobalAveragePool"] = {[](Ctx& c) { return globalPool(c, OpKind::ReduceMean); }};
  r["GlobalMaxPool"] = {[](Ctx& c) { return globalPool(c, OpKind::ReduceMax); }};
  r["BatchNormalization"] = {batchNormOp};
  r["InstanceNormalization"] = {instanceNormOp};
  r["LayerNormalization"] = {layerNormOp};
  r["MeanVarianceNormalization"] = {mvnOp};
  r["Softmax"] = {[](Ctx& c) { return softOp(c, SoftKind::Softmax); }};
  r["LogSoftmax"] = {[](Ctx& c) { return softOp(c, SoftKind::LogSoftmax); }};
  r["Hardmax"] = {[](Ctx& c) { return softOp(c, SoftKind::Hardmax); }};
}

} // namespace kiln::onnx
