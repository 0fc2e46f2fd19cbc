# SPDX-License-Identifier: Apache-2.0
"""``PretrainedConfig`` from transformers when installed (as in every lab image)."""

from __future__ import annotations

try:
    from transformers import PretrainedConfig
except ImportError:  # unit tests of the lab engine run without transformers

    class PretrainedConfig:  # type: ignore[no-redef]
        model_type = ""
        sub_configs: dict = {}

        def __init__(self, **kwargs) -> None:
            for key, value in kwargs.items():
                setattr(self, key, value)

        @classmethod
        def from_dict(cls, config_dict: dict, **kwargs):
            return cls(**{**config_dict, **kwargs})

        def to_dict(self) -> dict:
            return {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in vars(self).items()}

__all__ = ["PretrainedConfig"]
