# SPDX-License-Identifier: Apache-2.0
"""``FlexibleArgumentParser``: argparse that accepts ``--foo_bar`` for ``--foo-bar``."""

from __future__ import annotations

import argparse
import re
import sys

from vllm.logger import init_logger

logger = init_logger(__name__)


class FlexibleArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that allows both underscore and dash in names."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        if args is None:
            args = sys.argv[1:]
        args = list(args)
        if args and args[0] == "serve":
            idx = next((i for i, a in enumerate(args) if a == "--model" or a.startswith("--model=")), None)
            if idx is not None:
                logger.warning(
                    "With `vllm serve`, you should provide the model as a positional argument or in a "
                    "config file instead of via the `--model` option. "
                    "The `--model` option will be removed in v0.13.")
                if args[idx] == "--model":
                    tag, rest = args[idx + 1], idx + 2
                else:
                    tag, rest = args[idx].removeprefix("--model="), idx + 1
                args = ["serve", tag, *args[1:idx], *args[rest:]]
        processed: list[str] = []
        pattern = re.compile(r"(?<=--)[^\.]*")
        for arg in args:
            if arg.startswith("--"):
                if "=" in arg:
                    key, value = arg.split("=", 1)
                    processed.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), key, count=1)
                                     + "=" + value)
                else:
                    processed.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1))
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)

    def check_port(self, value):
        try:
            value = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError("Port must be an integer") from None
        if not (1024 <= value <= 65535):
            raise argparse.ArgumentTypeError("Port must be between 1024 and 65535")
        return value
