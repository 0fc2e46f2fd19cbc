# SPDX-License-Identifier: Apache-2.0
"""The ``vllm`` console script: ``vllm --version``, ``vllm serve MODEL [flags]``."""

from __future__ import annotations

import importlib.metadata
import sys


def _version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        from vllm.version import __version__
        return __version__


def main(argv: list[str] | None = None) -> None:
    from vllm.entrypoints.cli import serve
    from vllm.logger import install_excepthook

    install_excepthook()
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=_version())
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    if args.subparser == "serve":
        serve.validate(args)
    if hasattr(args, "dispatch_function"):
        args.dispatch_function(args)
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
