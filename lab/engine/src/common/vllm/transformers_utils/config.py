# SPDX-License-Identifier: Apache-2.0
"""Hugging Face config loading: vLLM's own config classes first, then transformers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vllm.logger import init_logger

logger = init_logger(__name__)


class LazyConfigDict(dict):
    def __getitem__(self, key):
        from vllm.transformers_utils import configs

        return getattr(configs, super().__getitem__(key))


# @@CONFIG_REGISTRY@@


def _hf_hub_cache(download_dir: str | None) -> Path:
    if download_dir:
        return Path(download_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "huggingface")
    return Path(hf_home) / "hub"


def _invalid(model: str) -> ValueError:
    return ValueError(
        "Invalid repository ID or local directory specified:"
        " '{model}'.\nPlease verify the following requirements:\n"
        "1. Provide a valid Hugging Face repository ID.\n"
        "2. Specify a local directory that contains a recognized "
        "configuration file.\n"
        "   - For Hugging Face models: ensure the presence of a "
        "'config.json'.\n"
        "   - For Mistral models: ensure the presence of a "
        "'params.json'.\n".format(model=model))


def resolve_model_dir(model: str, revision: str | None = None, download_dir: str | None = None) -> Path:
    """Local directory of ``model``: the path itself, or its snapshot in the HF cache.

    The lab has no route to the Hub, so a repository id resolves only when its
    snapshot is already in the cache (as after ``huggingface-cli download``).
    """
    path = Path(model)
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "params.json").is_file():
            raise _invalid(model)
        return path
    parts = model.split("/")
    if model.startswith(("/", ".")) or len(parts) != 2 or not all(parts):
        raise _invalid(model)
    repo_dir = _hf_hub_cache(download_dir) / f"models--{parts[0]}--{parts[1]}"
    ref = revision or "main"
    ref_file = repo_dir / "refs" / ref
    commit = ref_file.read_text().strip() if ref_file.is_file() else ref
    snapshot = repo_dir / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        raise _invalid(model)
    return snapshot


class _PlainConfig:
    """config.json as attributes (used only when transformers is not installed)."""

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, _PlainConfig(**value) if isinstance(value, dict) and key.endswith("_config")
                    and key != "quantization_config" else value)

    def to_dict(self) -> dict:
        return {k: (v.to_dict() if isinstance(v, _PlainConfig) else v) for k, v in vars(self).items()}


def get_config(model_dir: Path, trust_remote_code: bool = False, hf_overrides: dict | None = None):
    config_file = model_dir / "config.json"
    config_dict = json.loads(config_file.read_text())
    if hf_overrides:
        config_dict.update(hf_overrides)
    model_type = config_dict.get("model_type")
    if model_type in _CONFIG_REGISTRY:
        config_class = _CONFIG_REGISTRY[model_type]
        return config_class.from_dict(config_dict)
    try:
        from transformers import AutoConfig
    except ImportError:
        logger.warning("transformers is not installed; reading %s as plain attributes", config_file)
        return _PlainConfig(**config_dict)
    return AutoConfig.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code,
                                      **(hf_overrides or {}))
