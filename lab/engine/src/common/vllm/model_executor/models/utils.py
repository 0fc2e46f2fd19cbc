# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by model implementations, and the lab's CPU model base.

A lab model has no tensors. Its "forward" for one tensor-parallel rank is a
deterministic function of the rank's weight shard (the sha256 of the files the
rank loaded, see ``model_loader.weight_utils``) and of the step input; the
all-reduce of every rank's partial result picks the next token. A rank that
loaded different weights produces different tokens, a rank that is gone stops
the step, as with real tensor parallelism.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

MASK64 = (1 << 64) - 1


class PPMissingLayer:
    """A placeholder layer for pipeline-parallel ranks that do not own it."""


def maybe_prefix(prefix: str, name: str) -> str:
    return name if not prefix else f"{prefix}.{name}"


def extract_layer_index(layer_name: str) -> int:
    indices = [int(p) for p in layer_name.split(".") if p.isdigit()]
    if len(indices) != 1:
        raise AssertionError(f"layer name {layer_name} should only contain one integer")
    return indices[0]


def make_layers(num_hidden_layers: int, layer_fn: Callable[[str], Any], prefix: str):
    layers = [layer_fn(prefix=f"{prefix}.{i}") for i in range(num_hidden_layers)]
    return 0, num_hidden_layers, layers


def is_pp_missing_parameter(name: str, model: Any) -> bool:
    return False


def make_empty_intermediate_tensors_factory(keys: list[str], hidden_size: int):
    def factory(batch_size: int, dtype: Any = None, device: Any = None) -> dict:
        return {key: [0.0] * hidden_size for key in keys}
    return factory


def _merge_multimodal_embeddings(inputs_embeds, multimodal_embeddings, is_multimodal):
    return inputs_embeds


class AutoWeightsLoader:
    """Feeds (name, shard) pairs to a model; returns the names it loaded."""

    def __init__(self, module: Any, skip_prefixes: list[str] | None = None) -> None:
        self.module = module
        self.skip_prefixes = skip_prefixes or []

    def load_weights(self, weights: Iterable[tuple[str, bytes]]) -> set[str]:
        loaded = set()
        for name, digest in weights:
            if any(name.startswith(p) for p in self.skip_prefixes):
                continue
            self.module.absorb_weight(name, digest)
            loaded.add(name)
        return loaded


class CPUStandInForCausalLM:
    """Base of every lab model class: holds the rank's shard key, computes partials."""

    is_text_generation_model = True

    def __init__(self, *, vllm_config: Any = None, prefix: str = "") -> None:
        self.vllm_config = vllm_config
        self.prefix = prefix
        self._shard = hashlib.sha256()
        self.shard_key = b""

    def absorb_weight(self, name: str, digest: str) -> None:
        self._shard.update(name.encode() + b"\0" + digest.encode() + b"\0")

    def load_weights(self, weights: Iterable[tuple[str, str]]) -> set[str]:
        loaded = AutoWeightsLoader(self).load_weights(weights)
        self.shard_key = self._shard.digest()
        return loaded

    def forward_partial(self, rank: int, step_input: int) -> int:
        """This rank's contribution to the all-reduce for one decoding step."""
        h = hashlib.sha256(self.shard_key + rank.to_bytes(4, "little") + (step_input & MASK64).to_bytes(8, "little"))
        return int.from_bytes(h.digest()[:8], "little")
