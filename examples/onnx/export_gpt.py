#!/usr/bin/python3
"""Exports a second small decoder whose export takes PyTorch's other dynamic-shape paths:
dynamic batch and sequence, positions from torch.arange, a causal mask sliced from a
registered buffer (mask[:T, :T] with masked_fill), interleaved rotary embedding
(strided slices, stack, flatten), grouped-query attention by expand + reshape, LayerNorm
and GELU. Saves reference outputs for (batch, length) pairs.

    /usr/bin/python3 examples/onnx/export_gpt.py examples/onnx/gpt
"""
import math
import os
import sys

import numpy as np
import torch
from torch import nn

D, H, KV, HD, VOCAB, MAX_SEQ = 32, 4, 2, 8, 50, 64
SHAPES = [(1, 3), (2, 9)]


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.q = nn.Linear(D, H * HD)
        self.k = nn.Linear(D, KV * HD)
        self.v = nn.Linear(D, KV * HD)
        self.out = nn.Linear(D, VOCAB)
        self.ln = nn.LayerNorm(D)
        self.register_buffer("mask", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ)).bool())
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        self.register_buffer("freqs", torch.outer(torch.arange(MAX_SEQ).float(), inv))

    def forward(self, ids):
        b, t = ids.size()
        x = self.ln(self.emb(ids))
        f = self.freqs[torch.arange(t)]
        cos, sin = f.cos()[None, :, None, :], f.sin()[None, :, None, :]

        def rope(z):
            z1, z2 = z[..., 0::2], z[..., 1::2]
            return torch.stack((z1 * cos - z2 * sin, z1 * sin + z2 * cos), -1).flatten(-2)

        q = rope(self.q(x).view(b, t, H, HD))
        k = rope(self.k(x).view(b, t, KV, HD))
        v = self.v(x).view(b, t, KV, HD)
        k = k[:, :, :, None].expand(b, t, KV, H // KV, HD).reshape(b, t, H, HD)
        v = v[:, :, :, None].expand(b, t, KV, H // KV, HD).reshape(b, t, H, HD)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HD))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (torch.softmax(att, -1) @ v).transpose(1, 2).contiguous().view(b, t, D)
        return self.out(nn.functional.gelu(y))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "gpt"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = Decoder().eval()
    torch.onnx.export(model, (torch.randint(0, VOCAB, (2, 7)),), os.path.join(out_dir, "model.onnx"),
                      input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                      opset_version=17)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for b, t in SHAPES:
            ids = torch.randint(0, VOCAB, (b, t), generator=gen)
            np.save(os.path.join(out_dir, f"ids_{t}.npy"), ids.numpy())
            np.save(os.path.join(out_dir, f"logits_{t}.npy"), model(ids).numpy())


if __name__ == "__main__":
    main()
