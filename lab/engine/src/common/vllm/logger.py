# SPDX-License-Identifier: Apache-2.0
"""Logging configuration in vLLM's format: ``INFO 11-29 07:40:00 [file.py:123] message``.

vLLM prefixes every line with the process role (``(APIServer pid=7)``,
``(EngineCore_DP0 pid=7)``); the lab engine runs both roles in one process and
keeps the prefix per logger so logs read the same.
"""

from __future__ import annotations

import logging
import os
import sys

import vllm.envs as envs

_DATE_FORMAT = "%m-%d %H:%M:%S"
_ENGINE_CORE_MODULES = ("vllm.v1.", "vllm.distributed.")
_configured = False


class _VllmFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.fileinfo = os.path.basename(record.pathname)
        role = os.environ.get("VLLM_LAB_PROCESS_ROLE")
        if not role:
            role = "EngineCore_DP0" if record.name.startswith(_ENGINE_CORE_MODULES) else "APIServer"
        # Ray already prefixes lines forwarded from actors ("(RayWorkerWrapper pid=.., ip=..)")
        prefix = "" if role == "none" else f"({role} pid={os.getpid()}) "
        fmt_line = super().format(record)
        # As vLLM's NewLineFormatter: every continuation line of a record (a traceback, a banner) repeats the
        # record's own prefix (level, time, file:line) after a CR LF.
        if record.message:
            head = fmt_line.split(record.message)[0]
            fmt_line = fmt_line.replace("\n", "\r\n" + head)
        # and vLLM's decorated stdout puts the process prefix before every line
        return "\n".join(prefix + line for line in fmt_line.split("\n"))


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at emit time (Ray swaps it in its workers)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def _configure_root() -> None:
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger("vllm")
    if not envs.VLLM_CONFIGURE_LOGGING:
        return
    handler = _StdoutHandler(sys.stdout)
    handler.setFormatter(_VllmFormatter(
        envs.VLLM_LOGGING_PREFIX + "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s",
        datefmt=_DATE_FORMAT,
    ))
    root.addHandler(handler)
    root.setLevel(envs.VLLM_LOGGING_LEVEL)
    root.propagate = False


def _prefixed_excepthook(exc_type, exc, tb) -> None:
    """Uncaught exceptions end the log with the same process prefix as vLLM's decorated stderr."""
    import traceback

    role = os.environ.get("VLLM_LAB_PROCESS_ROLE") or "APIServer"
    prefix = "" if role == "none" else f"({role} pid={os.getpid()}) "
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    sys.stdout.flush()
    sys.stderr.write("".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n")))
    sys.stderr.flush()


def install_excepthook() -> None:
    sys.excepthook = _prefixed_excepthook


def init_logger(name: str) -> logging.Logger:
    _configure_root()
    return logging.getLogger(name)
