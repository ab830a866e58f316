#!/usr/bin/env python3
"""next_loss.py TOKENS B T N DIR... — the loss transformers computes, in float32, for each
Hugging Face directory DIR on batch N of the llm.c token file TOKENS (B rows of T
tokens: inputs tokens[N*B*T : N*B*T + B*T], targets shifted by one; llm.c's order, no
wrap). Prints one loss a line, in the order of the DIRs. Used by test/hf_transformers.sh (a pptrain export loads in
transformers and gives pptrain's loss on the next batch)."""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

path, (B, T, n), dirs = sys.argv[1], map(int, sys.argv[2:5]), sys.argv[5:]
head = np.fromfile(path, dtype=np.int32, count=256)
dtype = np.uint16 if head[0] == 20240520 else np.uint32
tok = np.fromfile(path, dtype=dtype, offset=1024).astype(np.int64)
start = n * B * T
x = torch.tensor(tok[start:start + B * T]).view(B, T)
y = torch.tensor(tok[start + 1:start + B * T + 1]).view(B, T)
for d in dirs:
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(x).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    print(f"{loss.item():.9f}")
