#!/usr/bin/env python3
"""gen_gpt2.py — makes the tiny GPT2LMHeadModel directories test/hf.sh imports, and the
losses transformers computes with them, once (the files are committed; make test runs
no Python):

    pip install torch transformers safetensors numpy   # CPU is enough
    make data                                          # data/tiny/train.bin
    python3 test/hf/gen_gpt2.py                        # rewrites test/hf/gpt2*/

Made with torch 2.15.0, transformers 5.24.0, safetensors 0.8.0, numpy 2.4.6.

- gpt2/: what transformers' save_pretrained writes for a GPT2LMHeadModel of vocab 256
  (test/hf.sh pads it to 384 rows with model.padded_vocab_size), n_embd 32, 4 layers
  (so that 4 pipeline ranks hold one each), 2 heads, n_positions 64, fp32, tied
  (config.json, model.safetensors without lm_head.weight, generation_config.json). Its
  parameters are random, every one of them (biases and LayerNorm weights too), so a
  tensor read into the wrong place changes the loss.
- gpt2_hub/: the same weights as the GPT-2 files on the Hub are laid out: names without
  the base model's "transformer." prefix (saved from GPT2Model), the attention's
  causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias) present, in fp16, cut into
  2 shards with model.safetensors.index.json; config.json in the Hub's older form.
- loss.txt: the mean cross-entropy transformers computes on the first batch pptrain
  trains on (data/tiny/train.bin, batch_size 4, seq_len 32: tokens [0, 129), targets
  shifted by one), in fp32, for gpt2/ and for gpt2_hub/ (its fp16 weights, widened).
"""
import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B, T = 4, 32


def batch():
    with open(os.path.join(ROOT, "data/tiny/train.bin"), "rb") as f:
        header = np.frombuffer(f.read(1024), np.int32)
        assert header[0] == 20240520 and header[1] == 1, header[:3]
        tok = np.frombuffer(f.read(2 * (B * T + 1)), np.uint16).astype(np.int64)
    x = torch.tensor(tok[:-1].reshape(B, T))
    y = torch.tensor(tok[1:].reshape(B, T))
    return x, y


def loss_of(model):
    x, y = batch()
    with torch.no_grad():
        logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1)).item()


def make_model():
    torch.manual_seed(26)
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=4, n_head=2,
                     activation_function="gelu_new", attn_implementation="eager",
                     bos_token_id=255, eos_token_id=255)
    model = GPT2LMHeadModel(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
               name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return model


def hub_dir(model, d):
    """The Hub's layout of the same weights, fp16, 2 shards (see the docstring)."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sd = {k[len("transformer."):]: v.detach().half().numpy()
          for k, v in model.state_dict().items() if k.startswith("transformer.")}
    L, P = model.config.n_layer, model.config.n_positions
    for l in range(L):
        sd[f"h.{l}.attn.bias"] = np.tril(np.ones((P, P), np.bool_)).reshape(1, 1, P, P)
        sd[f"h.{l}.attn.masked_bias"] = np.array(-1e4, np.float32)
    names = list(sd)
    cut = names.index("h.2.ln_1.weight")
    shards = {"model-00001-of-00002.safetensors": names[:cut],
              "model-00002-of-00002.safetensors": names[cut:]}
    weight_map, total = {}, 0
    for fname, part in shards.items():
        save_file({n: sd[n] for n in part}, os.path.join(d, fname), metadata={"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += sd[n].nbytes
    write_json(os.path.join(d, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    c = model.config
    write_json(os.path.join(d, "config.json"), {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 255, "embd_pdrop": 0.1, "eos_token_id": 255,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
        "n_ctx": c.n_positions, "n_embd": c.n_embd, "n_head": c.n_head, "n_layer": c.n_layer,
        "n_positions": c.n_positions, "resid_pdrop": 0.1, "torch_dtype": "float16",
        "vocab_size": c.vocab_size})


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def main():
    model = make_model()
    d = os.path.join(HERE, "gpt2")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    hub = os.path.join(HERE, "gpt2_hub")
    hub_dir(model, hub)
    # each directory as transformers loads it, in fp32
    a = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    b = GPT2LMHeadModel.from_pretrained(hub, dtype=torch.float32, attn_implementation="eager")
    for k, v in model.state_dict().items():
        assert torch.equal(a.state_dict()[k], v), k
        assert torch.equal(b.state_dict()[k], v.half().float()), k
    la, lb = loss_of(a.eval()), loss_of(b.eval())
    with open(os.path.join(HERE, "loss.txt"), "w") as f:
        f.write("# transformers' loss on data/tiny/train.bin's first batch (B=4, T=32)\n")
        f.write(f"gpt2 {la:.9f}\ngpt2_hub {lb:.9f}\n")
    print(f"gpt2 {la:.9f}  gpt2_hub {lb:.9f}")
    print(sorted(os.listdir(d)), sorted(os.listdir(hub)))


if __name__ == "__main__":
    main()
