# SPDX-License-Identifier: Apache-2.0
"""``vllm serve``."""

from __future__ import annotations

import argparse

from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

DESCRIPTION = "Launch a local OpenAI-compatible API server to serve LLM completions via HTTP."


def subparser_init(subparsers) -> argparse.ArgumentParser:
    serve_parser = subparsers.add_parser("serve", help=DESCRIPTION, description=DESCRIPTION,
                                         usage="vllm serve [model_tag] [options]")
    return make_arg_parser(serve_parser)


def validate(args: argparse.Namespace) -> None:
    validate_parsed_serve_args(args)


def cmd(args: argparse.Namespace) -> None:
    from vllm.entrypoints.openai.api_server import run_headless, run_server

    # If model is specified in CLI (as positional arg), it takes precedence
    if hasattr(args, "model_tag") and args.model_tag is not None:
        args.model = args.model_tag
    if args.headless:
        run_headless(args)
    else:
        run_server(args)


__all__ = ["FlexibleArgumentParser", "cmd", "subparser_init", "validate"]
