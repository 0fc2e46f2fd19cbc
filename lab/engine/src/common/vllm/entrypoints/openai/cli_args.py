# SPDX-License-Identifier: Apache-2.0
"""``vllm serve`` parser: frontend flags + engine flags, as vLLM's ``make_arg_parser``."""

from __future__ import annotations

import argparse

from vllm.engine.arg_utils import BOOL, AsyncEngineArgs, optional_type
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager


def make_arg_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("model_tag", type=str, nargs="?",
                        help="The model tag to serve (optional if specified in config)")
    parser.add_argument("--headless", action="store_true", default=False,
                        help="Run in headless mode. See multi-node data parallel documentation "
                             "for more details.")
    parser.add_argument("--api-server-count", "-asc", type=int, default=1,
                        help="How many API server processes to run.")
    g = parser.add_argument_group(title="Frontend")
    g.add_argument("--host", type=optional_type(str), default=None)
    g.add_argument("--port", type=int, default=8000)
    g.add_argument("--uds", type=optional_type(str), default=None)
    g.add_argument("--uvicorn-log-level", type=str, default="info",
                   choices=["critical", "debug", "error", "info", "trace", "warning"])
    g.add_argument("--disable-uvicorn-access-log", action=BOOL, default=False)
    g.add_argument("--api-key", type=optional_type(str), nargs="+", default=None)
    g.add_argument("--chat-template", type=optional_type(str), default=None)
    g.add_argument("--response-role", type=str, default="assistant")
    g.add_argument("--root-path", type=optional_type(str), default=None)
    g.add_argument("--enable-auto-tool-choice", action=BOOL, default=False)
    g.add_argument("--tool-call-parser", type=optional_type(str), default=None,
                   metavar="{" + ",".join(ToolParserManager.list_registered())
                   + "} or name registered in --tool-parser-plugin")
    g.add_argument("--enable-log-requests", action=BOOL, default=False)
    g.add_argument("--max-log-len", type=optional_type(int), default=None)
    g.add_argument("--ssl-keyfile", type=optional_type(str), default=None)
    g.add_argument("--ssl-certfile", type=optional_type(str), default=None)
    return AsyncEngineArgs.add_cli_args(parser)


def validate_parsed_serve_args(args: argparse.Namespace) -> None:
    """Quick checks for model serve args that raise prior to loading."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")


def validate_api_server_args(args: argparse.Namespace) -> None:
    valid_tool_parsers = ToolParserManager.list_registered()
    if args.enable_auto_tool_choice and args.tool_call_parser not in valid_tool_parsers:
        raise KeyError(f"invalid tool call parser: {args.tool_call_parser} "
                       f"(chose from {{ {','.join(valid_tool_parsers)} }})")
    valid_reasoning_parsers = ReasoningParserManager.list_registered()
    if args.reasoning_parser and args.reasoning_parser not in valid_reasoning_parsers:
        raise KeyError(f"invalid reasoning parser: {args.reasoning_parser} "
                       f"(chose from {{ {','.join(valid_reasoning_parsers)} }})")
