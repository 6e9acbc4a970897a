#!/usr/bin/python3
"""Exports a one-layer decoder step with a KV cache: inputs ids [1, seq] and the cached
keys and values [1, heads, past, head_dim]; outputs the last position's logits and the
updated cache. Its export slices a causal-mask buffer at mask[past:past+seq, :past+seq]
(a symbolic slice start) and keeps the last position with logits[:, -1:]. Saves inputs and
outputs for several (seq, past) pairs, past = 0 among them.

    /usr/bin/python3 examples/onnx/export_kv.py examples/onnx/kv
"""
import math
import os
import sys

import numpy as np
import torch
from torch import nn

D, H, HD, VOCAB, MAX_SEQ = 16, 2, 8, 30, 64
CASES = [(3, 2), (1, 5), (4, 0)]


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, VOCAB)
        self.register_buffer("mask", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ)).bool())

    def forward(self, ids, past_k, past_v):
        b, t = ids.shape
        p = past_k.shape[2]
        q, k, v = self.qkv(self.emb(ids)).split(D, -1)
        q = q.view(b, t, H, HD).transpose(1, 2)
        k = torch.cat([past_k, k.view(b, t, H, HD).transpose(1, 2)], 2)
        v = torch.cat([past_v, v.view(b, t, H, HD).transpose(1, 2)], 2)
        att = q @ k.transpose(-1, -2) / math.sqrt(HD)
        att = att.masked_fill(~self.mask[p:p + t, :p + t], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D)
        return self.out(y)[:, -1:, :], k, v


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "kv"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = Step().eval()
    example = (torch.randint(0, VOCAB, (1, 3)), torch.randn(1, H, 2, HD), torch.randn(1, H, 2, HD))
    torch.onnx.export(model, example, os.path.join(out_dir, "model.onnx"),
                      input_names=["ids", "past_k", "past_v"], output_names=["logits", "k", "v"],
                      dynamic_axes={"ids": {1: "seq"}, "past_k": {2: "past"}, "past_v": {2: "past"}},
                      opset_version=17)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t, p in CASES:
            args = (torch.randint(0, VOCAB, (1, t), generator=gen),
                    torch.randn(1, H, p, HD, generator=gen), torch.randn(1, H, p, HD, generator=gen))
            for i, a in enumerate(args):
                np.save(os.path.join(out_dir, f"in{i}_{t}_{p}.npy"), a.numpy())
            for i, o in enumerate(model(*args)):
                np.save(os.path.join(out_dir, f"out{i}_{t}_{p}.npy"), o.numpy())


if __name__ == "__main__":
    main()
