# SPDX-License-Identifier: Apache-2.0
from .registry import ModelRegistry

__all__ = ["ModelRegistry"]
