# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from outside the collection.
"""Root-cause diagnosis of a vLLM serving log.

Everything here is a pure function of the WHOLE log text (never a tail: vLLM
prints the real exception of a failed model inspection in a subprocess's
traceback long before the final one-line summary) plus what the prober saw
(HTTP status, seconds without log progress, container state).
"""

from __future__ import annotations

import re

# Category names are stable: roles, tests and users match on them.
ARCHITECTURE_NOT_SUPPORTED = "architecture_not_supported"
ARCHITECTURE_INSPECTION_FAILED = "architecture_inspection_failed"
DEPENDENCY_CONFLICT = "dependency_conflict"
COLLECTIVE_INIT_HANG = "collective_init_hang"
OUT_OF_MEMORY = "out_of_memory"
PLACEMENT_GROUP_UNAVAILABLE = "placement_group_unavailable"
ADDRESS_IN_USE = "address_in_use"
MODEL_FILES_MISSING = "model_files_missing"
API_KEY_REJECTED = "api_key_rejected"
ENGINE_EXITED = "engine_exited"
TIMEOUT = "timeout"

DESCRIPTIONS = {
    ARCHITECTURE_NOT_SUPPORTED: "architecture not supported by this image",
    ARCHITECTURE_INSPECTION_FAILED: "architecture failed inspection",
    DEPENDENCY_CONFLICT: "dependency conflict",
    COLLECTIVE_INIT_HANG: "collective (NCCL) init hang",
    OUT_OF_MEMORY: "out of memory",
    PLACEMENT_GROUP_UNAVAILABLE: "Ray placement group / resources unavailable",
    ADDRESS_IN_USE: "address in use",
    MODEL_FILES_MISSING: "model files missing",
    API_KEY_REJECTED: "API key rejected",
    ENGINE_EXITED: "engine exited",
    TIMEOUT: "not ready before the deadline",
}

HINTS = {
    ARCHITECTURE_NOT_SUPPORTED: "use an image whose vLLM and transformers know this architecture (hybrid_image overlay)",
    ARCHITECTURE_INSPECTION_FAILED: "the model module does not import in this image; see the root exception",
    DEPENDENCY_CONFLICT: "the image's packages do not satisfy vLLM's pins; run pip check in the image",
    COLLECTIVE_INIT_HANG: "ranks cannot reach each other: check NCCL_SOCKET_IFNAME/VLLM_HOST_IP per node and the fabric link",
    OUT_OF_MEMORY: "lower --gpu-memory-utilization or --max-model-len, or free unified memory (drop caches)",
    PLACEMENT_GROUP_UNAVAILABLE: "the Ray cluster lacks the GPUs TP x PP needs: check ray status and every node's fabric IP",
    ADDRESS_IN_USE: "another process holds the port: stop it or change the serving port",
    MODEL_FILES_MISSING: "the weights are not where the engine looks: run model_sync and check the model path",
    API_KEY_REJECTED: "the probe's API key is not the server's: check dgxspark_api_key and the env file",
    ENGINE_EXITED: "the engine exited; see the excerpt",
    TIMEOUT: "the engine made progress but was not ready in time; raise the deadline or see the excerpt",
}

_TRACEBACK_START = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<type>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Conflict|Warning))"
                             r"(?::\s*(?P<msg>.*))?$")
# A process/actor prefix and the level/date/[file:line] prefix, each followed by ONE space: a traceback frame's
# indentation after the prefix is kept (vLLM logs tracebacks line by line behind ERROR prefixes).
_LOG_PREFIX = re.compile(r"^(?:\(\w[\w:]*(?: pid=\d+)?(?:, ip=[\d.]+)?\) ?)?"
                         r"(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\] ?)?")

# The last line vLLM prints for each failure, most specific first.
_FINAL_PATTERNS = [
    (ARCHITECTURE_INSPECTION_FAILED, re.compile(r"Model architectures \[.*\] failed to be inspected")),
    (ARCHITECTURE_NOT_SUPPORTED, re.compile(r"Model architectures \[.*\] are not supported for now|"
                                            r"has model type `[^`]+` but Transformers does not recognize this architecture")),
    (OUT_OF_MEMORY, re.compile(r"(?:CUDA )?[Oo]ut of memory|OutOfMemoryError|No available memory for the cache blocks|"
                               r"running low on memory|is larger than the maximum number of tokens that can be stored in KV cache|"
                               r"on startup is less than desired GPU memory utilization")),
    (ADDRESS_IN_USE, re.compile(r"[Aa]ddress already in use|EADDRINUSE")),
    (MODEL_FILES_MISSING, re.compile(r"Invalid repository ID or local directory specified|does not appear to have a file named|"
                                     r"No such file or directory: '[^']*(?:config\.json|\.safetensors|tokenizer[^']*)'|"
                                     r"LocalEntryNotFoundError|RepositoryNotFoundError|Repository Not Found|"
                                     r"is not a local folder and is not a valid model identifier")),
    (PLACEMENT_GROUP_UNAVAILABLE, re.compile(r"Waiting for creating a placement group|No available node types can fulfill|"
                                             r"Cannot provide a placement group|placement group .* not ready|"
                                             r"required GPUs exceeds the total number of available GPUs")),
    (DEPENDENCY_CONFLICT, re.compile(r"VersionConflict|has requirement .* but you have|requires [\w.-]+[<>=!]=?[\d.]+.*but|"
                                     r"(?:ImportError|ModuleNotFoundError): .*(?:transformers|tokenizers|torch|huggingface_hub|"
                                     r"safetensors|numpy|ray|pydantic)\b")),
]

# Lines that show the ranks started their rendezvous (NCCL / torch.distributed init) ...
_RENDEZVOUS_STARTED = re.compile(r"distributed_init_method=|Copying the following environment variables to workers|"
                                 r"init_distributed_environment|NCCL INFO Bootstrap|NCCL INFO NET/|vLLM is using nccl==|"
                                 r"workers: \[.*rank=|world_size=\d+ rank=\d+")
# ... and lines that show it completed (the model is loading or the server is up).
_RENDEZVOUS_DONE = re.compile(r"Starting to load model|Loading weights took|Model loading took|"
                              r"Application startup complete|Starting vLLM API server|init engine .* took")

_THIRD_PARTY = ("transformers", "tokenizers", "torch", "huggingface_hub", "safetensors", "numpy", "ray", "pydantic",
                "xformers", "flashinfer", "triton")


# Terminal escapes: vLLM wraps its process prefixes in colour codes (ESC[1;36m ... ESC[0;0m) whatever stdout is,
# and progress bars add cursor moves; CSI sequences and two-character escapes are both dropped.
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])")


def plain(text: str) -> str:
    """The log as text: terminal escapes removed, CR line ends (progress output) and lone CRs made newlines."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def _strip(line: str) -> str:
    return _LOG_PREFIX.sub("", line.rstrip("\r\n"))


def tracebacks(text: str) -> list[dict]:
    """Every Python traceback in the log: its lines and the exception line that ends it."""
    lines = [_strip(line) for line in plain(text).splitlines()]
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != _TRACEBACK_START:
            i += 1
            continue
        block = [lines[i]]
        j = i + 1
        exception = None
        while j < len(lines):
            line = lines[j]
            block.append(line)
            stripped = line.strip()
            # Frames are indented; the exception line is the first unindented line after them.
            if line and not line.startswith((" ", "\t")) and stripped != _TRACEBACK_START:
                match = _EXCEPTION_LINE.match(stripped)
                if match:
                    exception = {"type": match.group("type"), "message": (match.group("msg") or "").strip(),
                                 "line": stripped}
                    # pydantic/multi-line messages: keep following indented detail lines
                    k = j + 1
                    detail = []
                    while k < len(lines) and lines[k].startswith("  ") and not lines[k].strip().startswith("File "):
                        block.append(lines[k])
                        exception["message"] = (exception["message"] + " " + lines[k].strip()).strip()
                        if not lines[k].strip().startswith("For further information"):
                            detail.append(_clean(lines[k].strip()))
                        k += 1
                    # What a wrapper such as pydantic's ValidationError says below its first line (vLLM's own words).
                    exception["detail"] = " ".join(part for part in detail if part)
                    j = k
                    break
                if not stripped.startswith(("During handling", "The above exception")):
                    break
            j += 1
        found.append({"lines": block, "exception": exception})
        i = max(j, i + 1)
    return found


# Exceptions that only wrap the real one: vLLM re-raises a model inspection subprocess's failure as
# CalledProcessError -> "RuntimeError: Error raised in subprocess:" with the child's traceback in the text,
# pydantic wraps config errors, Ray wraps task errors, the engine core wraps start-up failures.
_WRAPPERS = re.compile(r"^(?:subprocess\.)?CalledProcessError\b|^RuntimeError: Error raised in subprocess|"
                       r"ValidationError\b|^(?:ray\.exceptions\.)?RayTaskError|^RayActorError|EngineDeadError|"
                       r"^RuntimeError: Engine core initialization failed|^SystemExit")


def root_exception(text: str) -> dict | None:
    """The root cause: the first exception of the log that is not a mere wrapper of another one."""
    found = [tb["exception"] for tb in tracebacks(text) if tb["exception"]]
    for exception in found:
        if not _WRAPPERS.search(exception["line"]):
            return exception
    return found[0] if found else None


def _clean(line: str) -> str:
    """Drop pydantic's wrapping around vLLM's own message ("Value error, ... [type=value_error, ...]")."""
    line = re.sub(r"^Value error, ", "", line)
    return re.sub(r"\s*\[type=\w+.*$", "", line)


def final_line(text: str) -> str | None:
    """The last line that states a failure: a known final message, else the last exception or ERROR line."""
    lines = [_clean(_strip(line).strip()) for line in plain(text).splitlines()]
    for line in reversed(lines):
        for _category, pattern in _FINAL_PATTERNS:
            if pattern.search(line):
                return line
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line) or line.startswith("ERROR") or " ERROR " in line[:40]:
            return line
    return None


def rendezvous_state(text: str) -> str:
    """none | started | done: how far the ranks got with their collective initialisation."""
    state = "none"
    for line in plain(text).splitlines():
        if _RENDEZVOUS_DONE.search(line):
            state = "done"
        elif state == "none" and _RENDEZVOUS_STARTED.search(line):
            state = "started"
    return state


def _mentions_third_party(exception: dict | None) -> bool:
    if not exception or exception["type"] not in ("ImportError", "ModuleNotFoundError"):
        return False
    return bool(re.search(r"(?:from|named) '(?:%s)[.']" % "|".join(_THIRD_PARTY), exception["message"]))


def _excerpt(text: str, root: dict | None, final: str | None, limit: int = 40) -> str:
    parts = []
    tbs = [tb for tb in tracebacks(text) if tb["exception"]]
    first = next((tb for tb in tbs if root and tb["exception"]["line"] == root["line"]), tbs[0] if tbs else None)
    if first:
        block = first["lines"]
        if len(block) > limit:
            block = block[:3] + ["  ..."] + block[-(limit - 4):]
        parts.append("\n".join(block))
    if final and (not root or final != root["line"]):
        parts.append(final)
    if not parts:
        tail = [line for line in text.splitlines() if line.strip()][-15:]
        parts.append("\n".join(_strip(line) for line in tail))
    return "\n".join(parts)


def classify(text: str, *, http_status: int | None = None, seconds_without_progress: float | None = None,
             hang_after: float = 60.0, exited: bool = False, timed_out: bool = False) -> dict:
    """Diagnose a serving failure from the whole log and what the prober saw.

    Returns {category, description, summary, excerpt, root_exception, final_line, hint}.
    """
    text = plain(text)
    root = root_exception(text)
    final = final_line(text)
    category = None
    key_line = final

    if http_status in (401, 403):
        category = API_KEY_REJECTED
        key_line = f"HTTP {http_status} from the server for the probe's API key"
    if category is None and final:
        for name, pattern in _FINAL_PATTERNS:
            if pattern.search(final):
                category = name
                break
    if category is None:
        # A known failure anywhere in the log (e.g. an OOM printed before an unrelated final error).
        for name, pattern in _FINAL_PATTERNS:
            hit = next((line for line in text.splitlines() if pattern.search(line)), None)
            if hit:
                category, key_line = name, _strip(hit).strip()
                break
    if category == ARCHITECTURE_INSPECTION_FAILED and _mentions_third_party(root):
        category = DEPENDENCY_CONFLICT
    if category in (ARCHITECTURE_INSPECTION_FAILED, DEPENDENCY_CONFLICT, ARCHITECTURE_NOT_SUPPORTED) and root:
        # The one line that matters is the root exception, with the final message after it.
        key_line = root["line"] if category != ARCHITECTURE_NOT_SUPPORTED else final
    if category is None and rendezvous_state(text) == "started" and not exited and seconds_without_progress is not None \
            and seconds_without_progress >= hang_after:
        category = COLLECTIVE_INIT_HANG
        key_line = (f"no log progress for {seconds_without_progress:.0f} s after the ranks started their collective "
                    "initialisation (NCCL/gloo rendezvous)")
    if category is None:
        category = ENGINE_EXITED if exited or root else TIMEOUT
        key_line = ((root["line"] + (": " + root["detail"] if root.get("detail") else "")) if root else final) or (
            "the engine exited without an error line" if exited else "no error in the log")
    summary = f"{DESCRIPTIONS[category]}: {key_line}"
    if category in (ARCHITECTURE_INSPECTION_FAILED, DEPENDENCY_CONFLICT) and final and final != key_line:
        summary += f" (then: {final})"
    return {
        "category": category,
        "description": DESCRIPTIONS[category],
        "summary": " ".join(summary.split()),
        "excerpt": _excerpt(text, root, final),
        "root_exception": root["line"] if root else None,
        "final_line": final,
        "hint": HINTS[category],
    }
