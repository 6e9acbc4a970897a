#!/usr/bin/python3
"""Exports a small Llama-style decoder to ONNX with a dynamic sequence length, plus
reference inputs and outputs at several lengths.

The model: token embedding, RMSNorm, rotary position embedding, grouped-query attention
with a causal mask, SwiGLU MLP, a final RMSNorm and the output projection. Weights are
random (seed 0). Uses Debian's python3-torch; run with /usr/bin/python3.

    /usr/bin/python3 examples/onnx/export_llama.py examples/onnx/llama
writes llama/model.onnx and, for each length T, llama/ids_T.npy and llama/logits_T.npy.
"""
import math
import os
import sys

import numpy as np
import torch
from torch import nn

VOCAB, DIM, HEADS, KV_HEADS, HIDDEN, LAYERS, MAX_SEQ = 64, 32, 4, 2, 64, 2, 128
HEAD_DIM = DIM // HEADS
LENGTHS = [1, 5, 16]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention: each key/value head serves HEADS // KV_HEADS query heads.
        rep = HEADS // KV_HEADS
        k = k[:, :, None].expand(b, KV_HEADS, rep, t, HEAD_DIM).reshape(b, HEADS, t, HEAD_DIM)
        v = v[:, :, None].expand(b, KV_HEADS, rep, t, HEAD_DIM).reshape(b, HEADS, t, HEAD_DIM)
        scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
        mask = torch.full((t, t), float("-inf")).triu(1)
        probs = torch.softmax(scores + mask, dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM)
        return self.wo(out)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(DIM)
        self.attn = Attention()
        self.mlp_norm = RMSNorm(DIM)
        self.mlp = MLP()

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = RMSNorm(DIM)
        self.out = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        angles = torch.outer(torch.arange(MAX_SEQ).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.out(self.norm(x))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "llama"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = Decoder().eval()
    example = torch.randint(0, VOCAB, (1, 7))
    torch.onnx.export(model, (example,), os.path.join(out_dir, "model.onnx"),
                      input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {1: "seq"}, "logits": {1: "seq"}},
                      opset_version=14)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t in LENGTHS:
            ids = torch.randint(0, VOCAB, (1, t), generator=gen)
            np.save(os.path.join(out_dir, f"ids_{t}.npy"), ids.numpy())
            np.save(os.path.join(out_dir, f"logits_{t}.npy"), model(ids).numpy())


if __name__ == "__main__":
    main()
