# SPDX-License-Identifier: Apache-2.0
"""Parallel state (the lab engine has tensor parallelism only; PP size is 1)."""

from __future__ import annotations


class _PPGroup:
    is_first_rank = True
    is_last_rank = True
    world_size = 1
    rank_in_group = 0


def get_pp_group() -> _PPGroup:
    return _PPGroup()


def get_distributed_init_method(ip: str, port: int) -> str:
    # Brackets are not permitted in ipv4 addresses, see
    # https://github.com/python/cpython/issues/103848
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"
