#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.serve_probe."""

from __future__ import annotations

DOCUMENTATION = r"""
module: serve_probe
short_description: Wait until a vLLM endpoint really serves, or say why it does not
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Readiness means inference works. C(/health) answers 200, C(/v1/models) lists the served model, and a real
    completion of O(max_tokens) token(s) comes back within O(completion_timeout) seconds. C(/health) alone stays 200
    through NCCL deadlocks.
  - While it waits, it watches the serving container(s) on this node through the Docker API. It stops the moment one of
    them exits or restarts, instead of waiting out the deadline. It then reads the logs until they stop growing (at
    most 3 s), since Docker may still be copying the last lines of the process that ended.
  - On failure or timeout it returns RV(ready=false) and a RV(diagnosis) built from the WHOLE container log. The
    diagnosis holds the root exception (past vLLM's subprocess and pydantic wrappers), the final summary line and a
    category. A log that stops making progress after the ranks started their collective initialisation is reported
    as a collective (NCCL) init hang after O(hang_after) seconds.
  - It changes nothing. It runs the same in check mode.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  url:
    description: Base URL of the OpenAI-compatible server, for example V(http://192.168.100.11:8000).
    type: str
    required: true
  model:
    description: Served model name that C(/v1/models) must list and the completion uses.
    type: str
    required: true
  api_key:
    description: API key sent as a bearer token. It is never returned or logged.
    type: str
  api_key_file:
    description:
      - A file on the node whose C(VLLM_API_KEY=<key>) line holds the API key (the serving env file, root only, that
        the P(dgxspark.vllm.vllm_serve#role) role writes), read once when the probe starts. The key is then never
        among the module's arguments, which a task run in the background (C(async)) keeps in a file on the node for
        the whole wait.
      - A file without that line means no key. A file that cannot be read fails the probe, naming it.
      - Mutually exclusive with O(api_key).
    type: path
    version_added: 0.4.0
  containers:
    description:
      - Containers on this node whose exit or restart ends the wait at once, and whose logs feed the diagnosis.
      - The first one is the serving container (its log is diagnosed first).
    type: list
    elements: str
    default: []
  started_at:
    description:
      - C(State.StartedAt) of watched containers as their caller started them (name to timestamp). A container whose
        start time differs when the probe begins restarted in between (its engine already died), and the probe
        diagnoses it at once instead of waiting for the next restart.
      - Containers not named here are judged against their state when the probe starts.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for readiness, in total.
    type: int
    default: 900
  completion_timeout:
    description: Seconds one completion request may take before it counts as hanging.
    type: int
    default: 60
  hang_after:
    description: Seconds without new log output, after the collective initialisation started, that mean a hang.
    type: int
    default: 120
  interval:
    description: Seconds between two rounds of checks.
    type: float
    default: 2.0
  prompt:
    description: Prompt of the readiness completion.
    type: str
    default: "Hello"
  max_tokens:
    description: Tokens the readiness completion asks for.
    type: int
    default: 1
  docker_host:
    description: Docker daemon to talk to; the Docker SDK's defaults apply when unset.
    type: str
  fail_on_not_ready:
    description: Fail the task (with the diagnosis summary as message) instead of returning RV(ready=false).
    type: bool
    default: false
requirements:
  - docker (Python SDK) when O(containers) is set
seealso:
  - module: dgxspark.vllm.ray_cluster_info
"""

EXAMPLES = r"""
- name: Wait until the pair serves
  dgxspark.vllm.serve_probe:
    url: "http://{{ dgxspark_fabric_ip }}:8000"
    model: qwen3.5-122b
    api_key: "{{ dgxspark_api_key }}"
    containers: [dgxspark-ray-head]
    timeout: 1200
  register: probe
  no_log: false

- name: Fail with the root cause
  ansible.builtin.fail:
    msg: "{{ probe.diagnosis.summary }}"
  when: not probe.ready

- name: Wait in the background, the key read from the head's serving env file (never among the job's arguments)
  dgxspark.vllm.serve_probe:
    url: "http://{{ ansible_host }}:8000"
    model: qwen3.5-122b
    api_key_file: /etc/dgxspark/vllm/serve.env
    containers: [dgxspark-vllm]
    timeout: 1200
  async: 1500
  poll: 10
  register: probe
"""

RETURN = r"""
ready:
  description: Whether a real completion came back in time.
  returned: always
  type: bool
  sample: true
time_to_ready:
  description: Seconds from the start of the probe until the completion came back.
  returned: when ready
  type: float
  sample: 412.3
first_token_latency:
  description: Seconds the readiness completion took.
  returned: when ready
  type: float
  sample: 0.21
models:
  description: Model ids listed by C(/v1/models) at the last check.
  returned: always
  type: list
  elements: str
  sample: [qwen3.5-122b]
completion:
  description: Text of the readiness completion.
  returned: when ready
  type: str
  sample: " Hello"
checks:
  description: The last result of each check (health, models, completion), as short strings.
  returned: always
  type: dict
  sample: {health: "200", models: "listed", completion: "ok"}
containers:
  description: State of each watched container at the end (status, restart count, exit code).
  returned: always
  type: dict
diagnosis:
  description: Why the endpoint is not ready.
  returned: when not ready
  type: dict
  contains:
    category:
      description:
        - One of V(architecture_not_supported), V(architecture_inspection_failed), V(dependency_conflict),
          V(collective_init_hang), V(out_of_memory), V(placement_group_unavailable), V(address_in_use),
          V(model_files_missing), V(api_key_rejected), V(engine_exited), V(timeout).
      type: str
    summary:
      description: One line naming the category and the root-cause line.
      type: str
    excerpt:
      description: The root traceback and the final message from the whole log.
      type: str
    root_exception:
      description: The root exception line, if any.
      type: str
    final_line:
      description: The final failure line of the log, if any.
      type: str
    hint:
      description: What to check next.
      type: str
    container:
      description: The watched container that exited or restarted, if any.
      type: str
"""

import json
import time
import traceback
import urllib.error

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.urls import open_url

from ansible_collections.dgxspark.vllm.plugins.module_utils import _diagnosis, _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils._watchdog import api_key as serve_env_key

try:
    import docker  # pylint: disable=import-error
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()


def read_api_key_file(path):
    """The key of PATH's VLLM_API_KEY=<key> line (None when it has none); OSError when PATH cannot be read."""
    with open(path, encoding="utf-8") as handle:
        return serve_env_key(handle.read()) or None


def http_call(method, url, api_key=None, body=None, timeout=10.0):
    """(status, parsed JSON or text); status 0 means no HTTP answer (refused, reset, timed out)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode() if body is not None else None
    try:
        # No proxy: the endpoint is on the fabric, which a proxy would not reach.
        response = open_url(url, data=data, headers=headers, method=method, timeout=timeout, use_proxy=False,
                            validate_certs=True, follow_redirects="none")
        raw = response.read().decode("utf-8", "replace")
        status = response.status
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode("utf-8", "replace")
        status = exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return 0, str(getattr(exc, "reason", exc))
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


class ContainerWatch:
    """Follows containers' state, restarts and log growth through the Docker API."""

    def __init__(self, client, names, started_at=None):
        self.client = client
        self.names = list(names)
        self.started_at = dict(started_at or {})
        self.baseline = {}
        self.log_size = {}
        self.texts = {}
        self.last_progress = time.monotonic()

    def state(self, name):
        try:
            attrs = self.client.api.inspect_container(name)
        except Exception as exc:  # docker.errors.NotFound and API errors alike
            return {"status": "missing", "restart_count": 0, "exit_code": None, "started_at": None, "error": str(exc)}
        st = attrs.get("State", {})
        return {"status": st.get("Status"), "restart_count": attrs.get("RestartCount", 0), "exit_code": st.get("ExitCode"),
                "started_at": st.get("StartedAt"), "oom_killed": st.get("OOMKilled", False)}

    def start(self):
        for name in self.names:
            self.baseline[name] = self.state(name)
            if self.started_at.get(name):
                # The caller's start time is the baseline: a restart before the probe began counts.
                self.baseline[name]["started_at"] = self.started_at[name]

    def ended(self):
        """(name, reason) of the first watched container that exited, vanished or restarted since the start."""
        for name in self.names:
            now = self.state(name)
            before = self.baseline.get(name, {})
            if now["status"] in ("exited", "dead", "missing"):
                return name, f"container {name} is {now['status']} (exit code {now['exit_code']})"
            if now["restart_count"] != before.get("restart_count") or now["started_at"] != before.get("started_at"):
                return name, f"container {name} restarted (restart count {now['restart_count']})"
        return None, None

    def logs(self, name):
        try:
            raw = self.client.api.logs(name, stdout=True, stderr=True, timestamps=False)
        except Exception:  # the container may be gone: diagnose with what we have
            return ""
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)

    def seconds_without_progress(self):
        """Seconds since a watched log last grew; reads every log once and keeps it for text()."""
        grew = False
        for name in self.names:
            self.texts[name] = self.logs(name)
            size = len(self.texts[name])
            if size != self.log_size.get(name):
                grew = True
                self.log_size[name] = size
        if grew:
            self.last_progress = time.monotonic()
        return time.monotonic() - self.last_progress

    def text(self):
        """The logs as the last seconds_without_progress() read them, joined (no second read of a whole log)."""
        return "\n".join(t for t in (self.texts.get(n, "") for n in self.names) if t)


# Docker copies a container's output into its log on its own time, and may still be copying the last lines (an
# exception's detail) when the container is already seen exited or restarted: after an end, the logs are read until two
# reads LOG_SETTLE_STEP apart are the same, for at most LOG_SETTLE_SECONDS (a restarted engine keeps writing).
LOG_SETTLE_SECONDS = 3.0
LOG_SETTLE_STEP = 0.5


def settle_logs(watch, clock=time.monotonic, sleep=time.sleep):
    """Read the watched logs until they stop growing (bounded); the last read is what watch.text() returns."""
    deadline = clock() + LOG_SETTLE_SECONDS
    watch.seconds_without_progress()
    last = watch.text()
    while clock() < deadline:
        sleep(LOG_SETTLE_STEP)
        watch.seconds_without_progress()
        now = watch.text()
        if now == last:
            return
        last = now


def probe(params, watch=None, clock=time.monotonic, sleep=time.sleep, call=http_call):
    """Run the readiness loop; returns the module result (without 'changed')."""
    base = params["url"].rstrip("/")
    model = params["model"]
    start = clock()
    deadline = start + params["timeout"]
    checks = {"health": "not tried", "models": "not tried", "completion": "not tried"}
    models = []
    http_status = None
    ended_name = ended_reason = None
    if watch:
        watch.start()
    while True:
        if watch:
            ended_name, ended_reason = watch.ended()
            if ended_name:
                break
            # Log growth is sampled every round: a rendezvous that went silent is a hang, found without
            # waiting for the deadline (NCCL itself never times out here).
            quiet = watch.seconds_without_progress()
            if quiet >= params["hang_after"] and _diagnosis.rendezvous_state(watch.text()) == "started":
                break
        # The key on /health too: vLLM answers it without one, a door in front of the engine (roles/gateway) asks
        # every route for a key.
        status, _body = call("GET", base + "/health", api_key=params.get("api_key"), timeout=5)
        checks["health"] = str(status) if status else f"no answer ({_body})"
        if status in (401, 403):
            http_status = status
            break
        if status == 200:
            status, body = call("GET", base + "/v1/models", api_key=params.get("api_key"), timeout=10)
            models = [m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else models
            checks["models"] = "listed" if model in models else (f"HTTP {status}" if status != 200 else f"not listed in {models}")
            if status in (401, 403):
                http_status = status
                break
            if model in models:
                t0 = clock()
                status, body = call("POST", base + "/v1/completions", api_key=params.get("api_key"), timeout=params["completion_timeout"],
                                    body={"model": model, "prompt": params["prompt"], "max_tokens": params["max_tokens"],
                                          "temperature": 0})
                latency = clock() - t0
                if status == 200 and isinstance(body, dict) and body.get("choices"):
                    checks["completion"] = "ok"
                    return {"ready": True, "time_to_ready": round(clock() - start, 3), "first_token_latency": round(latency, 3),
                            "models": models, "completion": body["choices"][0].get("text", ""), "checks": checks}
                checks["completion"] = f"HTTP {status}" if status else f"no answer within {params['completion_timeout']} s"
                if status in (401, 403):
                    http_status = status
                    break
        if clock() >= deadline:
            break
        sleep(params["interval"])

    if watch and ended_name:
        settle_logs(watch, clock, sleep)
    seconds_quiet = watch.seconds_without_progress() if watch else None  # reads every log once more
    text = watch.text() if watch else ""
    diagnosis = _diagnosis.classify(text, http_status=http_status, seconds_without_progress=seconds_quiet,
                                    hang_after=params["hang_after"], exited=bool(ended_name),
                                    timed_out=not ended_name and http_status is None)
    if ended_reason:
        diagnosis["summary"] = f"{diagnosis['summary']} [{ended_reason}]"
        diagnosis["container"] = ended_name
    elif diagnosis["category"] == _diagnosis.TIMEOUT:
        diagnosis["summary"] = (f"{diagnosis['summary']} [not ready after {params['timeout']} s: health {checks['health']}, "
                                f"models {checks['models']}, completion {checks['completion']}]")
    return {"ready": False, "models": models, "checks": checks, "diagnosis": diagnosis}


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "no_log": True},
            "api_key_file": {"type": "path"},
            "containers": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 900},
            "completion_timeout": {"type": "int", "default": 60},
            "hang_after": {"type": "int", "default": 120},
            "interval": {"type": "float", "default": 2.0},
            "prompt": {"type": "str", "default": "Hello"},
            "max_tokens": {"type": "int", "default": 1, "no_log": False},  # a token count, not a secret
            "docker_host": {"type": "str"},
            "fail_on_not_ready": {"type": "bool", "default": False},
            "started_at": {"type": "dict", "default": {}},
        },
        mutually_exclusive=[("api_key", "api_key_file")],
        supports_check_mode=True,
    )
    params = module.params
    if params["api_key_file"]:
        try:
            params["api_key"] = read_api_key_file(params["api_key_file"])
        except OSError as error:
            module.fail_json(msg=f"cannot read the API key file {params['api_key_file']} (api_key_file): {error}")
        if params["api_key"]:
            module.no_log_values.add(params["api_key"])
    watch = None
    if params["containers"]:
        if not HAS_DOCKER:
            module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
        watch = ContainerWatch(_docker.client(module, docker, params["docker_host"]), params["containers"],
                               params["started_at"])
    result = probe(params, watch)
    if watch:
        result["containers"] = {name: watch.state(name) for name in watch.names}
    else:
        result["containers"] = {}
    if not result["ready"] and params["fail_on_not_ready"]:
        module.fail_json(msg=result["diagnosis"]["summary"], changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
