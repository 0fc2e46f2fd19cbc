# SPDX-License-Identifier: Apache-2.0
"""OpenAI-compatible HTTP server (standard library), vLLM's routes and behaviour.

* The port is bound before the engine starts and listened on only once the
  engine is ready: connections are refused while weights load.
* ``--api-key`` / ``VLLM_API_KEY`` guard paths starting with ``/v1`` only
  (401 ``{"error": "Unauthorized"}``); ``/health``, ``/metrics``, ``/version``,
  ``/load``, ``/ping``, ``/tokenize``, ``/detokenize`` and ``/invocations``
  (SageMaker's inference route: a completion or a chat, by its body) answer
  without a key, as in vLLM (0.17 and 0.32 alike: its middleware guards ``/v1``).
* ``/health`` is 200 while the engine runs and 503 once it is dead; after an
  engine death the server shuts down (exit status 0, like vLLM) unless
  ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import socket
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import vllm.envs as envs
from vllm.config import ModelConfig, ParallelConfig, VllmConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_api_server_args
from vllm.logger import init_logger
from vllm.reasoning import THINK_END, THINK_START, split_reasoning
from vllm.transformers_utils.tokenizer import _TOKEN as _TOKEN_RE
from vllm.transformers_utils.tokenizer import apply_chat_template, count_tokens
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.version import __version__ as VLLM_VERSION
from vllm.version import __version_tuple__

logger = init_logger("vllm.entrypoints.openai.api_server")
uvicorn_logger_prefix = "INFO:     "
VLLM_WATCHDOG_TIME_S = 5.0
REASONING_CONTENT_ALIAS = __version_tuple__ < (0, 15)  # 0.14 still copies reasoning to reasoning_content


def _uv(msg: str) -> None:
    print(f"{uvicorn_logger_prefix}{msg}", flush=True)


def log_non_default_args(args: argparse.Namespace) -> None:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    defaults = vars(make_arg_parser(FlexibleArgumentParser()).parse_args([]))
    non_default = {k: v for k, v in vars(args).items()
                   if k in defaults and defaults[k] != v and k not in ("api_key",)}
    if args.api_key:
        non_default["api_key"] = ["*" * 8]
    logger.info("non-default args: %s", non_default)


def create_engine_config(args: argparse.Namespace) -> VllmConfig:
    from vllm.platforms import check_device_type

    ea = EngineArgs.from_cli_args(args)
    check_device_type()  # vLLM's DeviceConfig(device="auto"): no GPU in the container, no platform
    model_config = ModelConfig(model=ea.model, tokenizer=ea.tokenizer, trust_remote_code=ea.trust_remote_code,
                               dtype=ea.dtype, seed=ea.seed, revision=ea.revision,
                               max_model_len=ea.max_model_len, quantization=ea.quantization,
                               enforce_eager=ea.enforce_eager, served_model_name=ea.served_model_name,
                               hf_overrides=ea.hf_overrides, download_dir=ea.download_dir)
    parallel_config = ParallelConfig(pipeline_parallel_size=ea.pipeline_parallel_size,
                                     tensor_parallel_size=ea.tensor_parallel_size,
                                     data_parallel_size=ea.data_parallel_size,
                                     distributed_executor_backend=ea.distributed_executor_backend,
                                     master_addr=ea.master_addr, master_port=ea.master_port,
                                     node_rank=ea.node_rank, nnodes=ea.nnodes)
    if ea.speculative_config:
        method = ea.speculative_config.get("method")
        if method and method.endswith("mtp") and not getattr(model_config.hf_text_config,
                                                              "mtp_num_hidden_layers", 0):
            logger.warning("speculative method %s requested but the model has no MTP layers", method)
    mc, pc = model_config, parallel_config
    logger.info(
        "Initializing a V1 LLM engine (v%s) with config: model=%r, speculative_config=%s, tokenizer=%r, "
        "trust_remote_code=%s, dtype=%s, max_seq_len=%d, download_dir=%r, tensor_parallel_size=%d, "
        "pipeline_parallel_size=%d, data_parallel_size=%d, distributed_executor_backend=%s, "
        "quantization=%s, enforce_eager=%s, kv_cache_dtype=%s, served_model_name=%s",
        VLLM_VERSION, mc.model, ea.speculative_config, mc.tokenizer or mc.model, mc.trust_remote_code,
        mc.dtype, mc.max_model_len, ea.download_dir, pc.tensor_parallel_size, pc.pipeline_parallel_size,
        pc.data_parallel_size, pc.distributed_executor_backend, mc.quantization, mc.enforce_eager,
        ea.kv_cache_dtype, mc.model_name)
    return VllmConfig(model_config=model_config, parallel_config=parallel_config,
                      kv_cache_dtype=ea.kv_cache_dtype, gpu_memory_utilization=ea.gpu_memory_utilization,
                      speculative_config=ea.speculative_config, reasoning_parser=ea.reasoning_parser)


def build_engine(vllm_config: VllmConfig):
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.executor.abstract import Executor

    executor = Executor.get_class(vllm_config.parallel_config)(vllm_config)
    return AsyncLLM(vllm_config, executor)


def create_server_socket(addr: tuple[str, int]) -> socket.socket:
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, sock: socket.socket, app: "App") -> None:
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.app = app


class App:
    """Routes and state of the API server."""

    ROUTES = [("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
              ("/load", "GET"), ("/ping", "GET, POST"), ("/version", "GET"), ("/metrics", "GET"),
              ("/tokenize", "POST"), ("/detokenize", "POST"), ("/invocations", "POST"),
              ("/v1/models", "GET"), ("/v1/completions", "POST"), ("/v1/chat/completions", "POST")]

    def __init__(self, engine, args: argparse.Namespace) -> None:
        self.engine = engine
        self.args = args
        self.model_config = engine.model_config
        self.served_names = list(self.model_config.served_model_name)
        self.reasoning_parser = args.reasoning_parser or None
        keys = [k for k in (args.api_key or [envs.VLLM_API_KEY]) if k]
        self.api_tokens = [hashlib.sha256(k.encode()).digest() for k in keys]
        self.created = int(time.time())
        self.server: _Server | None = None
        self.should_exit = threading.Event()

    # -- auth ---------------------------------------------------------------------------
    def verify_token(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, param = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode()).digest()
        ok = False
        for token in self.api_tokens:
            ok |= secrets.compare_digest(digest, token)
        return ok

    def terminate_if_errored(self) -> None:
        if self.engine.errored and not self.engine.is_running and not envs.VLLM_KEEP_ALIVE_ON_ENGINE_DEATH:
            self.should_exit.set()


def _error(message: str, err_type: str, code: int, param: str | None = None) -> tuple[int, dict]:
    return code, {"error": {"message": message, "type": err_type, "param": param, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - BaseHTTPRequestHandler API
        return None

    def _access_log(self, code: int) -> None:
        if self.app.args.disable_uvicorn_access_log:
            return
        host, port = self.client_address[:2]
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        _uv(f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {code} {phrase}')

    def _send(self, code: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response_only(code)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        if body:
            self.send_header("content-type", ctype)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self._access_log(code)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode())

    def _authorized(self) -> bool:
        path = self.path.split("?", 1)[0]
        root = self.app.args.root_path or ""
        path = path.removeprefix(root)
        if self.app.api_tokens and path.startswith("/v1") and not self.app.verify_token(
                self.headers.get("Authorization")):
            self._json(401, {"error": "Unauthorized"})
            return False
        return True

    def do_OPTIONS(self) -> None:  # noqa: N802
        self._send(200)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        app = self.app
        if path in ("/health", "/ping"):
            try:
                app.engine.check_health()
                self._send(200)
            except EngineDeadError:
                self._send(503)
        elif path == "/version":
            self._json(200, {"version": VLLM_VERSION})
        elif path == "/metrics":
            self._send(200, app.engine.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/load":
            self._json(200, {"server_load": app.engine.metrics.running})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": name, "object": "model", "created": app.created, "owned_by": "vllm",
                "root": app.model_config.model, "parent": None,
                "max_model_len": app.model_config.max_model_len,
                "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                                "created": app.created, "allow_create_engine": False, "allow_sampling": True,
                                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                "allow_fine_tuning": False, "organization": "*", "group": None,
                                "is_blocking": False}]} for name in app.served_names]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path == "/ping":
            return self.do_GET()
        if path not in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/invocations"):
            return self._json(404, {"detail": "Not Found"})
        try:
            request = json.loads(raw or b"{}")
            if not isinstance(request, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as e:
            return self._json(*_error(f"JSON decode error: {e}", "BadRequestError", 400))
        if path in ("/tokenize", "/detokenize"):
            return self._tokens(request, path == "/tokenize")
        # /invocations serves a chat when the body has messages, a completion otherwise (vLLM's dispatch).
        chat = path == "/v1/chat/completions" or (path == "/invocations" and "messages" in request)
        try:
            self._completion(request, chat)
        except EngineDeadError:
            # vLLM's exception handler: empty 500, then shut down if the engine is dead
            self._send(500)
            self.app.terminate_if_errored()

    # -- tokens -------------------------------------------------------------------------
    def _tokens(self, req: dict, encode: bool) -> None:
        """/tokenize and /detokenize: the stand-in's tokens are its words and marks, numbered by a stable hash."""
        if encode:
            if "messages" in req:
                text = apply_chat_template(req["messages"])
            else:
                text = req.get("prompt")
            if not isinstance(text, str):
                return self._json(*_error("prompt: Field required", "BadRequestError", 400, "prompt"))
            tokens = [int.from_bytes(hashlib.sha256(piece.encode()).digest()[:2], "big")
                      for piece in _TOKEN_RE.findall(text)]
            return self._json(200, {"count": len(tokens), "max_model_len": self.app.model_config.max_model_len,
                                    "tokens": tokens, "token_strs": None})
        tokens = req.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return self._json(*_error("tokens: Field required", "BadRequestError", 400, "tokens"))
        return self._json(200, {"prompt": " ".join(f"<{t}>" for t in tokens)})

    # -- completions --------------------------------------------------------------------
    def _completion(self, req: dict, chat: bool) -> None:
        app = self.app
        engine = app.engine
        model = req.get("model")
        if model is not None and model not in app.served_names:
            return self._json(*_error(f"The model `{model}` does not exist.", "NotFoundError", 404, "model"))
        model_name = model or app.served_names[0]
        if chat:
            messages = req.get("messages")
            if not isinstance(messages, list) or not messages:
                return self._json(*_error("messages: Field required", "BadRequestError", 400, "messages"))
            kwargs = req.get("chat_template_kwargs") or {}
            enable_thinking = bool(kwargs.get("enable_thinking", True))
            prompt = apply_chat_template(messages, enable_thinking=enable_thinking,
                                         think_in_prompt=engine.think_in_prompt and engine.thinking_model)
        else:
            prompt = req.get("prompt")
            if isinstance(prompt, list):
                prompt = "".join(str(p) for p in prompt)
            if not isinstance(prompt, str):
                return self._json(*_error("prompt: Field required", "BadRequestError", 400, "prompt"))
            enable_thinking = False
        prompt_tokens = count_tokens(prompt)
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        max_len = app.model_config.max_model_len
        if max_tokens is not None:
            if not isinstance(max_tokens, int) or max_tokens < 1:
                return self._json(*_error("max_tokens must be at least 1, got " f"{max_tokens}.",
                                          "BadRequestError", 400, "max_tokens"))
            if prompt_tokens + max_tokens > max_len:
                return self._json(*_error(
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                    f"context length is {max_len} tokens and your request has {prompt_tokens} input tokens "
                    f"({max_tokens} > {max_len} - {prompt_tokens}).", "BadRequestError", 400))
        elif prompt_tokens >= max_len:
            return self._json(*_error(
                f"This model's maximum context length is {max_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
                "BadRequestError", 400))
        engine.check_health()
        stats: dict = {}
        gen = engine.generate(prompt, max_tokens, chat=chat, enable_thinking=enable_thinking, stats=stats,
                              prompt_tokens=prompt_tokens)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        parse = chat and app.reasoning_parser is not None
        # Qwen3.5 opens <think> in the prompt: the output starts inside the reasoning
        start_in_reasoning = chat and enable_thinking and engine.think_in_prompt and engine.thinking_model
        if req.get("stream"):
            return self._stream(gen, stats, rid, created, model_name, chat, parse, start_in_reasoning,
                                prompt_tokens, req)
        text = "".join(gen)
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + stats["completion_tokens"],
                 "completion_tokens": stats["completion_tokens"], "prompt_tokens_details": None}
        if not chat:
            return self._json(200, {"id": rid, "object": "text_completion", "created": created,
                                    "model": model_name, "choices": [{
                                        "index": 0, "text": text, "logprobs": None,
                                        "finish_reason": stats["finish_reason"], "stop_reason": None,
                                        "prompt_logprobs": None, "prompt_token_ids": None}],
                                    "service_tier": None, "system_fingerprint": None, "usage": usage,
                                    "kv_transfer_params": None})
        reasoning, content = (split_reasoning((THINK_START if start_in_reasoning else "") + text)
                              if parse else (None, text))
        message = {"role": app.args.response_role, "content": content, "refusal": None, "annotations": None,
                   "audio": None, "function_call": None, "tool_calls": [], "reasoning": reasoning}
        if REASONING_CONTENT_ALIAS:
            message["reasoning_content"] = reasoning
        self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": model_name,
                         "choices": [{"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": stats["finish_reason"], "stop_reason": None,
                                      "token_ids": None}],
                         "service_tier": None, "system_fingerprint": None, "usage": usage,
                         "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _sse(self, obj) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {payload}\n\n".encode())

    def _stream(self, gen, stats, rid, created, model_name, chat, parse, in_reasoning, prompt_tokens,
                req) -> None:
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        obj_type = "chat.completion.chunk" if chat else "text_completion"
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

        def chunk(choice: dict, usage=None) -> dict:
            out = {"id": rid, "object": obj_type, "created": created, "model": model_name, "choices": [choice]}
            if include_usage:
                out["usage"] = usage
            return out

        def delta(**fields) -> dict:
            d = dict(fields)
            if "reasoning" in d and REASONING_CONTENT_ALIAS:
                d["reasoning_content"] = d["reasoning"]
            return {"index": 0, "delta": d, "logprobs": None, "finish_reason": None}

        try:
            if chat:
                self._sse(chunk(delta(role=self.app.args.response_role, content=""), None))
            for text in gen:
                if chat:
                    if parse:
                        if text == THINK_START and not in_reasoning:
                            in_reasoning = True
                            continue
                        if text == THINK_END and in_reasoning:
                            in_reasoning = False
                            continue
                        self._sse(chunk(delta(reasoning=text) if in_reasoning else delta(content=text)))
                    else:
                        self._sse(chunk(delta(content=text)))
                else:
                    self._sse(chunk({"index": 0, "text": text, "logprobs": None, "finish_reason": None,
                                     "stop_reason": None}))
            final = ({"index": 0, "delta": {}, "logprobs": None, "finish_reason": stats["finish_reason"],
                      "stop_reason": None} if chat else
                     {"index": 0, "text": "", "logprobs": None, "finish_reason": stats["finish_reason"],
                      "stop_reason": None})
            self._sse(chunk(final))
            if include_usage:
                n = stats["completion_tokens"]
                self._sse({"id": rid, "object": obj_type, "created": created, "model": model_name, "choices": [],
                           "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n,
                                     "completion_tokens": n}})
        except EngineDeadError:
            # the stream is already 200: vLLM sends the error as the next event
            self._sse({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the "
                                            "root cause.", "type": "InternalServerError", "param": None,
                                 "code": 500}})
        self._sse("[DONE]")
        self._chunk(b"")


def _watchdog(app: App) -> None:
    while not app.should_exit.wait(VLLM_WATCHDOG_TIME_S):
        app.terminate_if_errored()


def run_server(args: argparse.Namespace) -> None:
    """Run a single-worker API server."""
    logger.info("vLLM API server version %s", VLLM_VERSION)
    log_non_default_args(args)
    validate_api_server_args(args)
    sock_addr = (args.host or "", args.port)
    sock = create_server_socket(sock_addr)
    addr, port = sock_addr
    listen_address = f"http://{f'[{addr}]' if ':' in addr else addr or '0.0.0.0'}:{port}"

    def signal_handler(*_) -> None:
        # Interrupt server on sigterm while initializing
        raise KeyboardInterrupt("terminated")

    signal.signal(signal.SIGTERM, signal_handler)
    vllm_config = create_engine_config(args)
    engine = build_engine(vllm_config)
    app = App(engine, args)
    logger.info("Starting vLLM API server %d on %s", 0, listen_address)
    logger.info("Available routes are:")
    for route, methods in App.ROUTES:
        logger.info("Route: %s, Methods: %s", route, methods)
    server = _Server(sock, app)
    app.server = server
    _uv(f"Started server process [{os.getpid()}]")
    _uv("Waiting for application startup.")
    sock.listen(2048)
    _uv("Application startup complete.")
    signal.signal(signal.SIGTERM, lambda *_: app.should_exit.set())
    signal.signal(signal.SIGINT, lambda *_: app.should_exit.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    threading.Thread(target=_watchdog, args=(app,), daemon=True).start()
    app.should_exit.wait()
    if engine.errored:
        logger.error("AsyncLLM output_handler failed.\nvllm.v1.engine.exceptions.EngineDeadError: "
                     "EngineCore encountered an issue. See stack trace (above) for the root cause.")
    _uv("Shutting down")
    server.shutdown()
    server.server_close()
    _uv("Waiting for application shutdown.")
    engine.shutdown()
    _uv("Application shutdown complete.")
    _uv(f"Finished server process [{os.getpid()}]")


def run_headless(args: argparse.Namespace) -> None:
    """``--headless``: run this node's ranks for a multi-node ``mp`` deployment; no API server."""
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    if args.api_server_count > 1:
        raise ValueError("api_server_count can't be set in headless mode")
    vllm_config = create_engine_config(args)
    pc = vllm_config.parallel_config
    if pc.distributed_executor_backend != "mp" or pc.node_rank == 0:
        raise ValueError("headless mode needs --nnodes > 1, --node-rank > 0 and the mp executor backend "
                         "(the lab engine supports no data-parallel headless engines)")

    def signal_handler(signum, frame) -> None:
        logger.debug("Received %d signal.", signum)
        raise SystemExit

    signal.signal(signal.SIGTERM, signal_handler)
    signal.signal(signal.SIGINT, signal_handler)
    head_node_address = f"{pc.master_addr}:{pc.master_port}"
    logger.info("Launching vLLM (v%s) headless multiproc executor, with head node address %s for "
                "torch.distributed process group.", VLLM_VERSION, head_node_address)
    executor = MultiprocExecutor(vllm_config)
    outcome = executor.serve_headless()
    if outcome == "lost":
        logger.error("Lost the connection to rank 0 at %s; shutting down.", head_node_address)
        executor.shutdown()
        raise SystemExit(1)
    logger.info("Head node shut down; exiting.")
    executor.shutdown()
