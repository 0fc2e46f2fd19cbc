#!/usr/bin/env python3
"""Write tiny model directories for the lab engine (a few MB, deterministic bytes).

* ``Qwen3.5-122B-A10B-FP8`` -- stand-in for ``Qwen/Qwen3.5-122B-A10B-FP8``: the
  fields that matter of its ``config.json`` (``architectures``
  ``["Qwen3_5MoeForConditionalGeneration"]``, ``model_type`` ``qwen3_5_moe``, a
  ``text_config`` with the hybrid layer layout, MoE and MTP sizes, a
  ``vision_config``, an FP8 ``quantization_config``), tokenizer files,
  generation config, and small safetensors shards with an index.
* ``Qwen3.5-35B-A3B-FP8`` -- stand-in for ``Qwen/Qwen3.5-35B-A3B-FP8``, the
  same architecture at about 35 GB: a Qwen3.5 that fits one Spark.
* ``Qwen3-30B-A3B`` -- a Qwen3 MoE (``Qwen3MoeForCausalLM``), which the legacy
  0.14 engine supports.

The shards are a few KB, but each safetensors index states, in ``metadata.total_size``, the bytes of the checkpoint
it stands for (:data:`DECLARED_BYTES`): the lab engine charges that against a node's memory, and the collection
reads it before any download, as both do with a real checkpoint's index.

Every directory gets ``lab_manifest.json`` with the sha256 of each file; the
engine checks weight shards against it while loading. Shards are real
safetensors files (8-byte header length, JSON header, payload), so tools that
read safetensors headers work on them. Same arguments -> same bytes.

Usage::

    make_models.py --out DIR [--model qwen35|qwen35a3b|qwen3moe|all] [--shard-kb 512] [--hf-cache]

``--hf-cache`` lays the models out as a Hugging Face hub cache
(``DIR/models--Qwen--<name>/snapshots/<commit>/``, ``refs/main``), so
``vllm serve Qwen/<name> --download-dir DIR`` resolves them without a network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

QWEN_EOS = 248044
QWEN35_NAME = "Qwen3.5-122B-A10B-FP8"
QWEN35_A3B_NAME = "Qwen3.5-35B-A3B-FP8"
QWEN3MOE_NAME = "Qwen3-30B-A3B"
# The checkpoints the stand-ins stand for (their index's metadata.total_size): Qwen3.5-122B-A10B-FP8 is about 119 GB,
# Qwen3.5-35B-A3B-FP8 about 35 GB, Qwen3-30B-A3B in BF16 about 61 GB.
DECLARED_BYTES = {"qwen35": 119 * 10**9, "qwen35a3b": 35 * 10**9, "qwen3moe": 61 * 10**9}


def _qwen35_a3b_config() -> dict:
    config = _qwen35_config(layers=40)
    config["text_config"].update({"hidden_size": 2048, "num_attention_heads": 16, "moe_intermediate_size": 512,
                                  "shared_expert_intermediate_size": 512})
    config["vision_config"]["out_hidden_size"] = 2048
    return config


def _qwen35_config(layers: int = 48) -> dict:
    interval = 4
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0.dev0",
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "vocab_size": 248320,
            "hidden_size": 3072,
            "num_hidden_layers": layers,
            "num_attention_heads": 32,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-06,
            "max_position_embeddings": 262144,
            "full_attention_interval": interval,
            "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                            for i in range(layers)],
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 64,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 1024,
            "shared_expert_intermediate_size": 1024,
            "mtp_num_hidden_layers": 1,
            "attn_output_gate": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                "mrope_interleaved": True},
            "eos_token_id": QWEN_EOS,
            "dtype": "bfloat16",
        },
        "vision_config": {
            "model_type": "qwen3_5_moe",
            "depth": 27,
            "hidden_size": 1152,
            "num_heads": 16,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 3072,
        },
        "quantization_config": {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head", "model.visual", "mtp.fc", "model.language_model.embed_tokens"],
        },
    }


def _qwen3moe_config() -> dict:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
    }


def _tokenizer_files(eos: str, extra_special: list[str]) -> dict[str, bytes]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", *extra_special]
    # Every merge's parts are in the vocabulary, so the Hugging Face tokenizers library loads it (a benchmark on
    # the controller builds its prompts with the served model's own tokenizer.json).
    vocab = {tok: i for i, tok in enumerate(["!", "\"", "#", "a", "b", "c", "d", "e", "Ġ", "Ġt", "he", "t", "h"])}
    tokenizer_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 151643 + i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for i, t in enumerate(specials)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": ["Ġ t", "h e"]},
    }
    tokenizer_config = {
        "add_bos_token": False,
        "bos_token": None,
        "eos_token": eos,
        "pad_token": "<|endoftext|>",
        "model_max_length": 262144,
        "tokenizer_class": "Qwen2Tokenizer",
        "split_special_tokens": False,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "chat_template": (
            "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
            "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
            "{%- endif %}{%- endif %}"),
    }
    return {
        "tokenizer.json": json.dumps(tokenizer_json, indent=2).encode(),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2).encode(),
        "vocab.json": json.dumps(vocab).encode(),
        "merges.txt": b"#version: 0.2\n\xc4\xa0 t\nh e\n",
    }


def _payload(seed: str, size: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def _safetensors(tensors: list[tuple[str, str, list[int], bytes]]) -> bytes:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(t[3] for t in tensors)


def _weights(name: str, prefix: str, shards: int, shard_bytes: int, fp8: bool, declared: int) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    per_tensor = 4
    tensor_bytes = max(1024, shard_bytes // per_tensor)
    cols = 128
    rows = tensor_bytes // cols
    layer = 0
    total = 0
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = []
        for t in range(per_tensor):
            kind = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj", "self_attn.qkv_proj",
                    "mlp.shared_expert.down_proj")[t]
            tname = f"{prefix}.layers.{layer}.{kind}.weight"
            data = _payload(f"{name}/{tname}", rows * cols)
            tensors.append((tname, "F8_E4M3" if fp8 else "BF16", [rows, cols if fp8 else cols // 2], data))
            if fp8:
                sname = tname + "_scale_inv"
                sdata = _payload(f"{name}/{sname}", 4 * max(1, rows // 128))
                tensors.append((sname, "F32", [max(1, rows // 128), 1], sdata))
            layer += 1
        for tname, _, _, data in tensors:
            weight_map[tname] = fname
            total += len(data)
        files[fname] = _safetensors(tensors)
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": declared or total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2).encode()
    return files


def model_files(model: str, shard_kb: int) -> tuple[str, dict[str, bytes]]:
    if model in ("qwen35", "qwen35a3b"):
        name = QWEN35_NAME if model == "qwen35" else QWEN35_A3B_NAME
        config = _qwen35_config() if model == "qwen35" else _qwen35_a3b_config()
        files = {"config.json": json.dumps(config, indent=2).encode(),
                 "generation_config.json": json.dumps({"bos_token_id": 248044, "do_sample": True,
                                                       "eos_token_id": [248046, 248044], "pad_token_id": 248044,
                                                       "temperature": 0.6, "top_k": 20, "top_p": 0.95},
                                                      indent=2).encode(),
                 "preprocessor_config.json": json.dumps({"image_processor_type": "Qwen2VLImageProcessorFast",
                                                         "patch_size": 16, "merge_size": 2}).encode()}
        files.update(_tokenizer_files("<|im_end|>", ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]))
        files.update(_weights(name, "model.language_model", 4, shard_kb * 1024, fp8=True,
                              declared=DECLARED_BYTES[model]))
    elif model == "qwen3moe":
        name = QWEN3MOE_NAME
        files = {"config.json": json.dumps(_qwen3moe_config(), indent=2).encode(),
                 "generation_config.json": json.dumps({"bos_token_id": 151643, "do_sample": True,
                                                       "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                                                       "temperature": 0.6, "top_k": 20, "top_p": 0.95},
                                                      indent=2).encode()}
        files.update(_tokenizer_files("<|im_end|>", []))
        files.update(_weights(name, "model", 2, shard_kb * 1024, fp8=False, declared=DECLARED_BYTES[model]))
    else:
        raise SystemExit(f"unknown model {model!r}")
    manifest = {"model": f"Qwen/{name}", "files": {n: hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}}
    files["lab_manifest.json"] = json.dumps(manifest, indent=2).encode()
    return name, files


def _write(dest: Path, files: dict[str, bytes]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for fname, data in files.items():
        tmp = dest / f".{fname}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, dest / fname)


def write_model(out: Path, model: str, shard_kb: int = 512, hf_cache: bool = False) -> Path:
    name, files = model_files(model, shard_kb)
    if not hf_cache:
        dest = out / name
        _write(dest, files)
        return dest
    commit = hashlib.sha1(files["lab_manifest.json"]).hexdigest()
    repo = out / f"models--Qwen--{name}"
    dest = repo / "snapshots" / commit
    _write(dest, files)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=["qwen35", "qwen35a3b", "qwen3moe", "all"], default="all")
    parser.add_argument("--shard-kb", type=int, default=512, help="size of each weight shard (default 512)")
    parser.add_argument("--hf-cache", action="store_true", help="write a Hugging Face hub cache layout")
    args = parser.parse_args(argv)
    for model in (["qwen35", "qwen3moe"] if args.model == "all" else [args.model]):
        print(write_model(args.out, model, args.shard_kb, args.hf_cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
