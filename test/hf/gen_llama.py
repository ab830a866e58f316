#!/usr/bin/env python3
"""gen_llama.py — makes the tiny Llama-family directories test/hf_llama.sh imports, and
the losses transformers computes with them, once (the files are committed; make test
runs no Python):

    pip install torch transformers safetensors numpy   # CPU is enough
    make data                                          # data/tiny/train.bin
    python3 test/hf/gen_llama.py                       # rewrites test/hf/{llama3,llama_mqa,qwen2,mistral}/
                                                       # and test/hf/llama_loss.txt

Made with torch 2.15.0, transformers 5.24.0, safetensors 0.8.0, numpy 2.4.6.

Every model has vocabulary 256 (data/tiny's byte tokens), hidden size 32, fp32 weights
that are all random (norm weights 1 + 0.1 N(0,1), the rest 0.08 N(0,1), biases too), so
that a tensor read into the wrong place, or rows stacked in the wrong order, changes the
loss. Each directory is what save_pretrained writes (config.json, generation_config.json,
model.safetensors), except where said:

- llama3/: LlamaForCausalLM as Llama 3 is built: grouped-query attention (4 query heads
  of 8 channels sharing 2 key/value heads), SwiGLU of 64, rms_norm_eps 1e-5, untied,
  4 layers (one per rank on 4 pipeline ranks), RoPE base 500000 with Llama 3's scaling
  (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings
  256: of the 4 frequencies one is kept, one smoothed, two divided, so each band shows
  at T = 32). config.json is rewritten in the Hub's form (rope_theta and rope_scaling,
  torch_dtype), as Llama 3.2's files have it; transformers loads it to the same model
  (checked below).
- llama_mqa/: LlamaForCausalLM, multi-query (4 heads, 1 key/value head), SwiGLU of 48,
  tied, unscaled RoPE base 10000, rms_norm_eps 1e-6, 4 layers; config.json as
  transformers 5 writes it (rope_parameters).
- qwen2/: Qwen2ForCausalLM, q/k/v biases, 4 heads / 2 key/value heads, SwiGLU of 64,
  untied, 2 layers (use_sliding_window false: sliding_window null).
- mistral/: MistralForCausalLM, 4 heads / 2 key/value heads, SwiGLU of 64, tied,
  2 layers, sliding_window 4096 (MistralConfig's default: covers the sequence).

llama_loss.txt: for each directory, the loss transformers computes on the first batch
pptrain trains on (data/tiny/train.bin, batch_size 4, seq_len 32: tokens [0, 129),
targets shifted by one) in fp32 ("NAME loss"), then the losses of 10 AdamW steps on
llm.c's batch order (batch n = tokens [128 n, 128 n + 129)) with pptrain's optimizer
exactly ("NAME steps l1 ... l10"): lr 1e-3 constant (train.lr_schedule.decay constant,
no warmup), betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on the 2-D tensors only (the
embedding and head included, norm weights and biases not), the global gradient norm
clipped to 1.0 (torch's clip_grad_norm_: scale 1 / (norm + 1e-6), as optim.c's).
"""
import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B, T, STEPS = 4, 32, 10
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
COMMON = dict(vocab_size=256, hidden_size=32, num_attention_heads=4, hidden_act="silu",
              max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
              attn_implementation="eager")

MODELS = {
    "llama3": (LlamaForCausalLM, LlamaConfig(
        **COMMON, num_key_value_heads=2, intermediate_size=64, num_hidden_layers=4,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 256})),
    "llama_mqa": (LlamaForCausalLM, LlamaConfig(
        **COMMON, num_key_value_heads=1, intermediate_size=48, num_hidden_layers=4,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(
        **COMMON, num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2,
        rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False)),
    "mistral": (MistralForCausalLM, MistralConfig(
        **COMMON, num_key_value_heads=2, intermediate_size=64, num_hidden_layers=2,
        rms_norm_eps=1e-5, tie_word_embeddings=True, sliding_window=4096)),
}


def tokens(n_tokens):
    with open(os.path.join(ROOT, "data/tiny/train.bin"), "rb") as f:
        header = np.frombuffer(f.read(1024), np.int32)
        assert header[0] == 20240520 and header[1] == 1, header[:3]
        return np.frombuffer(f.read(2 * n_tokens), np.uint16).astype(np.int64)


def batch(n):
    """llm.c's batch n: tokens [n B T, (n + 1) B T + 1) (data/tiny holds far more)."""
    tok = tokens((n + 1) * B * T + 1)[n * B * T:]
    x = torch.tensor(tok[:B * T].reshape(B, T))
    y = torch.tensor(tok[1:B * T + 1].reshape(B, T))
    return x, y


def loss_of(model, n=0):
    x, y = batch(n)
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def make_model(cls, cfg, seed):
    torch.manual_seed(seed)
    model = cls(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return model


def train(model):
    """pptrain's run: AdamW (decoupled decay on the 2-D tensors), clip 1.0, lr constant."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    model.train()
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = loss_of(model, step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses


def hub_form(d):
    """config.json in the Hub's older form: rope_theta and rope_scaling, torch_dtype."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        c = json.load(f)
    rope = c.pop("rope_parameters")
    c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    c["torch_dtype"] = c.pop("dtype")
    with open(path, "w") as f:
        f.write(json.dumps(c, indent=2, sort_keys=True) + "\n")


def main():
    lines = ["# transformers' fp32 losses on data/tiny/train.bin (B=4, T=32): NAME loss L "
             "(batch 0), NAME steps L1..L10 (10 AdamW steps: see gen_llama.py)"]
    for seed, (name, (cls, cfg)) in enumerate(MODELS.items(), start=26):
        model = make_model(cls, cfg, seed)
        d = os.path.join(HERE, name)
        shutil.rmtree(d, ignore_errors=True)
        model.save_pretrained(d)
        if name == "llama3":
            hub_form(d)
        back = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        for k, v in model.state_dict().items():
            assert torch.equal(back.state_dict()[k], v), (name, k)
        assert back.config.rope_parameters == model.config.rope_parameters, name
        with torch.no_grad():
            first = loss_of(back).item()
        steps = train(back)
        assert abs(steps[0] - first) < 1e-6, (name, steps[0], first)
        lines.append(f"{name} loss {first:.9f}")
        lines.append(f"{name} steps " + " ".join(f"{l:.9f}" for l in steps))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name}: loss {first:.9f}, after 10 steps {steps[-1]:.9f}, {size} bytes")
    with open(os.path.join(HERE, "llama_loss.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
