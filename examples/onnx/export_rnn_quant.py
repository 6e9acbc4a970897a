#!/usr/bin/python3
"""Exports the recurrent and quantized models that tests/e2e/onnx_models.py checks, with
PyTorch's outputs next to each:

  lstm/  a 2-layer bidirectional LSTM (batch_first) with a linear head, opset 14
  gru/   a GRU with an initial state, opset 14
  qmlp/  an MLP with int8 fake-quantized weights (per output channel) and uint8 activations
         (per tensor), exported with QuantizeLinear/DequantizeLinear pairs (QDQ), opset 13
  qcnn/  the same for a small CNN (per-channel int8 conv weights), opset 13
  masked/ boolean-mask indexing, torch.nonzero + index_select and torch.unique: results
         whose sizes depend on the input's values (NonZero, GatherND, Unique), opset 14
  loop/  a TorchScript loop over range(n) with a data-dependent break: an ONNX Loop whose
         trip count and condition are run-time data (kiln runs it on the host side), opset 14
  scan/  a TorchScript loop over range(n) that appends to a list and stacks it: a Loop that
         carries a sequence (SequenceEmpty, SequenceInsert, ConcatFromSequence), which kiln
         converts as a scan output of a run-time length, opset 14

    /usr/bin/python3 examples/onnx/export_rnn_quant.py examples/onnx [NAME...]
"""
import os
import sys
from typing import List

import numpy as np
import torch
from torch import nn


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 12)

    def forward(self, x, h0):
        y, h = self.rnn(x, h0)
        return y, h


def fq_act(x, scale, zp):
    return torch.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)


def fq_weight(w):
    # Symmetric int8 per output channel.
    scale = (w.detach().abs().amax(dim=tuple(range(1, w.dim()))) / 127).clamp(min=1e-8)
    zp = torch.zeros(w.shape[0], dtype=torch.int32)
    return torch.fake_quantize_per_channel_affine(w, scale, zp, 0, -128, 127)


class QMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = fq_act(x, 0.05, 128)
        x = torch.relu(nn.functional.linear(x, fq_weight(self.fc1.weight), self.fc1.bias))
        x = fq_act(x, 0.04, 0)
        return nn.functional.linear(x, fq_weight(self.fc2.weight), self.fc2.bias)


class QCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = fq_act(x, 0.02, 128)
        x = torch.relu(nn.functional.conv2d(x, fq_weight(self.conv.weight), self.conv.bias, padding=1))
        x = fq_act(x, 0.03, 0)
        x = nn.functional.max_pool2d(x, 2).flatten(1)
        return nn.functional.linear(x, fq_weight(self.fc.weight), self.fc.bias)


class Masked(nn.Module):
    def forward(self, x):
        pos = x[x > 0]
        rows = x.index_select(0, torch.nonzero(x[:, 0] > 0).squeeze(1)) * 2
        return pos.sum(0, keepdim=True) + pos.numel(), rows, torch.unique(x.round())


class DynLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, n):
        y = x
        for _ in range(int(n)):
            y = torch.tanh(self.lin(y)) + x
            if bool(y.sum() > 10.0):
                break
        return y


class ScanLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, n):
        y = x
        ys: List[torch.Tensor] = []
        for _ in range(int(n)):
            y = torch.tanh(self.lin(y)) + x
            ys.append(y * 2)
        return y, torch.stack(ys), torch.cat(ys, 1)


def export(model, inputs, out_dir, opset, names):
    os.makedirs(out_dir, exist_ok=True)
    model.eval()
    with torch.no_grad():
        outs = model(*inputs)
    if not isinstance(outs, tuple):
        outs = (outs,)
    torch.onnx.export(model, tuple(inputs), os.path.join(out_dir, "model.onnx"),
                      opset_version=opset, input_names=names,
                      output_names=[f"out{i}" for i in range(len(outs))])
    for i, t in enumerate(inputs):
        np.save(os.path.join(out_dir, f"in{i}.npy"), t.numpy())
    for i, t in enumerate(outs):
        np.save(os.path.join(out_dir, f"out{i}.npy"), t.numpy())


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "examples/onnx"
    only = set(sys.argv[2:])  # the models to write (all by default); every model is still
    torch.manual_seed(0)      # built in order, so each gets the same weights either way
    models = [("lstm", Lstm(), [torch.randn(2, 5, 8)], 14, ["x"]),
              ("gru", Gru(), [torch.randn(4, 3, 6), torch.randn(1, 3, 12)], 14, ["x", "h0"]),
              ("qmlp", QMlp(), [torch.randn(4, 16)], 13, ["x"]),
              ("qcnn", QCnn(), [torch.randn(2, 3, 8, 8)], 13, ["x"])]
    torch.manual_seed(0)
    models.append(("masked", Masked(), [torch.randn(6, 5)], 14, ["x"]))
    torch.manual_seed(0)
    models.append(("loop", torch.jit.script(DynLoop()), [torch.randn(2, 4), torch.tensor(5)], 14,
                   ["x", "n"]))
    torch.manual_seed(0)
    models.append(("scan", torch.jit.script(ScanLoop()), [torch.randn(2, 4), torch.tensor(3)],
                   14, ["x", "n"]))
    for name, model, inputs, opset, names in models:
        if not only or name in only:
            export(model, inputs, os.path.join(root, name), opset, names)


if __name__ == "__main__":
    main()
