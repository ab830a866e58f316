#!/usr/bin/env python3
"""gen.py — makes the golden files test/test_hf.c checks src/hf/ against, with the
reference implementations: the `safetensors` package (its Rust writer) for the tensor
files, huggingface_hub's shard splitter for the sharded directory, and Python's json as
transformers calls it (json.dumps(indent=2, sort_keys=True) + "\n") for the index and the
config.json files. Run by hand, not by `make test` (the files are committed):

    pip install safetensors numpy huggingface_hub
    python3 test/hf/gen.py            # rewrites test/hf/*; review the diff

Made with safetensors 0.8.0, numpy 2.4, huggingface_hub 2.4. The values are listed here
as bit patterns (and as formulas) that test_hf.c repeats, so a read is compared with
what was written, exactly.
"""
import json
import os
import shutil

import numpy as np
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file
from huggingface_hub.serialization import split_state_dict_into_shards_factory

HERE = os.path.dirname(os.path.abspath(__file__))
META = {"format": "pt"}  # what transformers' save_pretrained puts in every shard

# f32.safetensors: "w" [3, 4] from these bits (zeros, a subnormal, inf, NaN, ...), "b" [5]
# from the formula, a scalar and an empty tensor (test_hf.c: W_BITS, formula()).
W_BITS = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x00000001, 0x007FFFFF,
          0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3EAAAAAB, 0xC0490FDB]
# bf16.safetensors: "src" (fp32), "x" = src rounded to BF16 as torch rounds (nearest,
# ties to even; NaN -> 0x7FC0), "x.wide" = x widened back to fp32 (test_hf.c: SRC_BITS).
SRC_BITS = [0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF,
            0xFF800000, 0xFFC00001, 0x00000001, 0xC0490FDB, 0x80000000]
# f16.safetensors: "h" F16 from these bits (subnormals, the largest normal, +-0, +-inf,
# quiet, signaling and negative NaN), "h.wide" = numpy's exact widening to fp32
# (test_hf.c: H_BITS).
H_BITS = [0x0001, 0x03FF, 0x0400, 0x7BFF, 0x3C00, 0xBC00, 0x8000, 0x7C00,
          0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x3555, 0x8001, 0x0200, 0x2E66]


def formula(t, n):
    """Element i of test tensor number t: small dyadic fractions, exact in fp32."""
    return np.array([((i * 37 + t * 11) % 101 - 50) / 64.0 for i in range(n)], np.float32)


def f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


def bf16_round(x):
    """torch's c10::BFloat16 round_to_nearest_even, as uint16 bits."""
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[np.isnan(x)] = 0x7FC0
    return r


def spec(dtype, arr):
    return TensorSpec(dtype=dtype, shape=list(arr.shape), data_ptr=arr.ctypes.data,
                      data_len=arr.nbytes)


def tensor_files():
    save_file({"w": f32(W_BITS).reshape(3, 4), "b": formula(1, 5),
               "scalar": np.array(2.5, np.float32), "empty": np.zeros((0, 3), np.float32)},
              os.path.join(HERE, "f32.safetensors"), metadata=META)
    src = f32(SRC_BITS).reshape(2, 5)
    x = bf16_round(src.ravel()).reshape(2, 5)
    wide = (x.astype(np.uint32) << 16).view(np.float32)
    serialize_file({"src": spec("float32", src), "x": spec("bfloat16", x),
                    "x.wide": spec("float32", wide)},
                   os.path.join(HERE, "bf16.safetensors"), metadata=META)
    h = np.array(H_BITS, np.uint16).view(np.float16)
    save_file({"h": h, "h.wide": h.astype(np.float32)},
              os.path.join(HERE, "f16.safetensors"), metadata=META)


# sharded/: a two-layer Llama's names in state-dict order, tensor t = formula(t, numel),
# cut at 150 bytes: the 192-byte up_proj is over the limit and gets a shard of its own
# ahead of the shard being filled (huggingface_hub's rule), so there are 4 shards.
SHARDED = [("model.embed_tokens.weight", (8, 4)),
           ("model.layers.0.input_layernorm.weight", (4,)),
           ("model.layers.0.self_attn.q_proj.weight", (4, 4)),
           ("model.layers.0.mlp.up_proj.weight", (12, 4)),
           ("model.layers.1.input_layernorm.weight", (4,)),
           ("model.layers.1.self_attn.q_proj.weight", (4, 4)),
           ("model.norm.weight", (4,)),
           ("lm_head.weight", (8, 4))]
MAX_SHARD = 150


def sharded_dir():
    d = os.path.join(HERE, "sharded")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sd = {name: formula(t, int(np.prod(shape))).reshape(shape)
          for t, (name, shape) in enumerate(SHARDED)}
    split = split_state_dict_into_shards_factory(
        sd, get_storage_size=lambda a: a.nbytes, max_shard_size=MAX_SHARD,
        filename_pattern="model{suffix}.safetensors")  # transformers' pattern
    assert split.is_sharded and len(split.filename_to_tensors) == 4
    for fname, names in split.filename_to_tensors.items():
        save_file({n: sd[n] for n in names}, os.path.join(d, fname), metadata=META)
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    write_json(os.path.join(d, "model.safetensors.index.json"), index)
    write_json(os.path.join(d, "config.json"), TINY_LLAMA)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:  # as transformers' save_pretrained
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# config.json of the sharded directory: what pptrain's config writer writes for it.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1,
    "eos_token_id": [2, 3], "head_dim": 2, "hidden_act": "silu", "hidden_size": 4,
    "intermediate_size": 12, "max_position_embeddings": 64, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 2, "num_hidden_layers": 2,
    "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
    "vocab_size": 8}

# The Hub's meta-llama/Llama-3.2-1B-Instruct config.json (transformers 4.45), structure
# and values as published: rope_scaling llama3, eos a list, tied embeddings.
LLAMA32 = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256}

# The same model as transformers 5 saves it: rope_parameters holds rope_theta, dtype
# (checked against transformers 5.24's AutoConfig save_pretrained of LLAMA32, which also
# adds pad_token_id null).
LLAMA32_V5 = {k: v for k, v in LLAMA32.items()
              if k not in ("rope_scaling", "rope_theta", "torch_dtype")}
LLAMA32_V5.update({
    "dtype": "bfloat16", "transformers_version": "5.0.0",
    "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                        "rope_type": "llama3"}})

# The Hub's openai-community/gpt2 config.json.
GPT2 = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257}

# The Hub's Qwen/Qwen2.5-0.5B config.json.
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936}

# What pptrain's config writer must write for the configs above (the keys it knows, in
# transformers' layout): Llama 3.2 in the Hub's form and in transformers 5's, GPT-2.
_SKIP = ("attention_dropout", "initializer_range", "pretraining_tp", "transformers_version",
         "use_cache")
EXPORT_LLAMA_HUB = {k: v for k, v in LLAMA32.items() if k not in _SKIP}
EXPORT_LLAMA_V5 = {k: v for k, v in LLAMA32_V5.items() if k not in _SKIP}
EXPORT_GPT2 = {k: GPT2[k] for k in ("activation_function", "architectures", "bos_token_id",
                                     "eos_token_id", "layer_norm_epsilon", "model_type",
                                     "n_embd", "n_head", "n_layer", "n_positions",
                                     "vocab_size")}
EXPORT_GPT2["n_inner"] = None


def configs():
    for name, obj in [("llama32_config.json", LLAMA32),
                      ("llama32_v5_config.json", LLAMA32_V5), ("gpt2_config.json", GPT2),
                      ("qwen2_config.json", QWEN2), ("export_llama_hub.json", EXPORT_LLAMA_HUB),
                      ("export_llama_v5.json", EXPORT_LLAMA_V5),
                      ("export_gpt2.json", EXPORT_GPT2)]:
        write_json(os.path.join(HERE, name), obj)


if __name__ == "__main__":
    tensor_files()
    sharded_dir()
    configs()
    print("gen.py: wrote", ", ".join(sorted(os.listdir(HERE))))
