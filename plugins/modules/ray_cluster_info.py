#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.ray_cluster_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_cluster_info
short_description: Report the nodes, GPUs and placement groups of the Ray cluster whose head runs on this node
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the node that hosts the Ray head container and executes, inside that container through the Docker API,
    C(ray --version), C(ray list nodes --format json --detail), C(ray list placement-groups --format json --detail)
    and C(ray status).
  - The state API behind C(ray list) is served by the Ray dashboard, which the collection binds to C(127.0.0.1) in the
    head's host network namespace; an exec into the head container reaches it there (O(dashboard_address)).
  - When the container has C(RAY_AUTH_MODE) and C(RAY_AUTH_TOKEN_PATH) in its environment (Ray token authentication),
    they are passed to every exec. The token itself is never read by the module.
  - Returns every node with its state and resources, the alive and dead node counts, the GPUs of the alive nodes and
    how many are free, and the placement groups.
  - When the head container does not exist or is not running, the module returns RV(reachable=false) with a RV(msg)
    and does not fail, unless O(fail_on_unreachable=true). A running head whose Ray commands fail is an error.
  - Read-only; it never reports a change.
requirements:
  - docker (the Docker SDK for Python) on the managed node
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  container:
    description:
      - Name or ID of the Ray head container on this node.
    type: str
    default: dgxspark-ray-head
  dashboard_address:
    description:
      - Address of the Ray dashboard (state API) as seen from inside the head container.
      - Match the C(--dashboard-host) and C(--dashboard-port) the head was started with.
    type: str
    default: http://127.0.0.1:8265
  docker_host:
    description:
      - The Docker daemon to talk to, for example V(unix:///var/run/docker.sock).
      - When not set, the Docker SDK's defaults apply (C(DOCKER_HOST), then the local socket).
    type: str
  timeout:
    description:
      - Seconds each Ray command may take inside the container before the module gives up on it.
    type: int
    default: 30
  fail_on_unreachable:
    description:
      - Fail when the head container is missing or not running, instead of returning RV(reachable=false).
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait (inside the module, bounded to the second) until the cluster shows O(wait_nodes) alive nodes,
        O(wait_gpus) GPUs and every address of O(wait_node_ips). V(0) reads the cluster once and returns.
      - The wait ends early when the head container stops, or restarts (its start time is no longer O(started_at)).
        The result then has RV(container_ended) and the last view of the cluster the module could read, so a caller
        can still name the nodes that were missing.
      - Waiting never fails the module; RV(wait_satisfied) tells the outcome.
    type: int
    default: 0
  wait_nodes:
    description: Alive nodes to wait for.
    type: int
    default: 1
  wait_gpus:
    description: GPUs of the alive nodes to wait for.
    type: float
    default: 0
  wait_node_ips:
    description: Node addresses that must all be alive.
    type: list
    elements: str
    default: []
  wait_interval:
    description:
      - Seconds between two reads of the cluster while waiting. The container's state is checked every half second
        in between, so a head that dies is seen at once, not at the next read.
    type: float
    default: 3
  detail:
    description:
      - What a read without a wait (O(wait_timeout=0)) asks Ray. V(full) runs four Ray commands (the version, the nodes,
        the placement groups and C(ray status)); V(nodes) runs one, C(ray list nodes), and returns the node list and
        the counts without RV(ray_version), RV(auth_mode), RV(placement_groups) or RV(status_text), and
        RV(gpus_available) null, as after a wait (each Ray command starts a Python process in the container, about a second on the lab).
      - A wait reads only the nodes whatever this says.
    type: str
    choices: [full, nodes]
    default: full
  started_at:
    description:
      - The head container's C(State.StartedAt) when the caller started it. A different start time means the container
        restarted since, and ends a wait with RV(container_ended). Without it, the start time at the module's start is used.
    type: str
notes:
  - C(ray status) lags the state API when a node dies (it keeps counting the node for a while); node states and the GPU
    total therefore come from C(ray list nodes), and only the GPUs in use from C(ray status).
  - Ray 2.5x does not report a placement group's strategy through the state API; C(strategy) in RV(placement_groups) is
    null then.
seealso:
  - module: dgxspark.vllm.rdma_facts
  - name: Ray state CLI
    description: C(ray list) reference.
    link: https://docs.ray.io/en/latest/ray-observability/reference/cli.html
  - name: Ray token authentication
    description: C(RAY_AUTH_MODE), C(RAY_AUTH_TOKEN_PATH).
    link: https://docs.ray.io/en/latest/ray-security/token-auth.html
"""

EXAMPLES = r"""
- name: Read the pair's Ray cluster on its head node
  dgxspark.vllm.ray_cluster_info:
  register: ray

- name: Show nodes and GPUs
  ansible.builtin.debug:
    msg: >-
      {{ ray.alive_nodes }} alive ({{ ray.alive_node_ips | join(', ') }}), {{ ray.dead_nodes }} dead,
      {{ ray.gpus_available }}/{{ ray.gpus_total }} GPUs free, Ray {{ ray.ray_version }}
  when: ray.reachable

- name: Wait (bounded) until both nodes and both GPUs are there
  dgxspark.vllm.ray_cluster_info:
    container: dgxspark-ray-head
    wait_timeout: 180
    wait_nodes: 2
    wait_gpus: 2
    wait_node_ips: [192.168.100.10, 192.168.100.11]
  register: ray
  failed_when: not ray.wait_satisfied
"""

RETURN = r"""
reachable:
  description: Whether the head container was found running (the Ray commands ran).
  returned: always
  type: bool
  sample: true
msg:
  description: Why the cluster could not be read.
  returned: when RV(reachable=false)
  type: str
  sample: "container dgxspark-ray-head does not exist on this node"
container:
  description: The head container's name and state.
  returned: always
  type: dict
  sample: {"name": "dgxspark-ray-head", "status": "running", "id": "4f1c2a9b0d3e"}
ray_version:
  description: Ray version in the head container.
  returned: when RV(reachable=true), O(wait_timeout=0) and O(detail=full)
  type: str
  sample: 2.54.1
auth_mode:
  description: C(RAY_AUTH_MODE) of the head container, or null when it is not set.
  returned: when RV(reachable=true), O(wait_timeout=0) and O(detail=full)
  type: str
  sample: token
nodes:
  description: Every node the cluster knows, head first, then alive before dead.
  returned: when RV(reachable=true)
  type: list
  elements: dict
  sample:
    - node_id: 296e1ad97c1d77ccb06c60564d20144af493ac61b7d26b5bc0178626
      ip: 192.168.100.10
      name: 192.168.100.10
      state: ALIVE
      alive: true
      is_head: true
      state_message: null
      gpus: 1.0
      resources: {"CPU": 20.0, "GPU": 1.0, "memory": "98.5 GiB", "object_store_memory": "1.0 GiB"}
    - node_id: 41803fbf52b23258dea376fb264960f03a9363963ddd13fd53b927ae
      ip: 192.168.100.11
      name: 192.168.100.11
      state: DEAD
      alive: false
      is_head: false
      state_message: "Unexpected termination: health check failed due to missing too many heartbeats"
      gpus: 1.0
      resources: {"CPU": 20.0, "GPU": 1.0}
alive_nodes:
  description: Number of alive nodes.
  returned: when RV(reachable=true)
  type: int
  sample: 2
dead_nodes:
  description: Number of dead nodes (a restarted raylet joins as a new node, so its old entry stays dead).
  returned: when RV(reachable=true)
  type: int
  sample: 0
alive_node_ips:
  description: IPs of the alive nodes.
  returned: when RV(reachable=true)
  type: list
  elements: str
  sample: ["192.168.100.10", "192.168.100.11"]
dead_node_ips:
  description: IPs with only dead nodes (no alive node at that IP).
  returned: when RV(reachable=true)
  type: list
  elements: str
  sample: []
gpus_total:
  description: GPUs of the alive nodes.
  returned: when RV(reachable=true)
  type: float
  sample: 2.0
gpus_available:
  description:
    - GPUs of the alive nodes not in use (placement-group reservations count as free until a task uses them).
    - Null after a wait or with O(detail=nodes) (it needs C(ray status)).
  returned: when RV(reachable=true)
  type: float
  sample: 2.0
placement_groups:
  description: Placement groups of the cluster, sorted by id.
  returned: when RV(reachable=true), O(wait_timeout=0) and O(detail=full)
  type: list
  elements: dict
  sample:
    - id: f0c59d17052d0e8af5cf43cc82ee01000000
      name: vllm_tp2
      state: CREATED
      strategy: null
      is_detached: true
      scheduling_state: FINISHED
      bundles:
        - index: 0
          resources: {"CPU": 1.0, "GPU": 1.0}
          node_id: 296e1ad97c1d77ccb06c60564d20144af493ac61b7d26b5bc0178626
        - index: 1
          resources: {"CPU": 1.0, "GPU": 1.0}
          node_id: 41803fbf52b23258dea376fb264960f03a9363963ddd13fd53b927ae
wait_satisfied:
  description: Whether the cluster showed what O(wait_nodes), O(wait_gpus) and O(wait_node_ips) ask for.
  returned: always
  type: bool
  sample: true
waited:
  description: Seconds the module waited.
  returned: always
  type: float
  sample: 12.4
missing_node_ips:
  description: Addresses of O(wait_node_ips) not alive in the last view of the cluster.
  returned: always
  type: list
  elements: str
  sample: ["192.168.100.11"]
container_ended:
  description: Why a wait ended early because of the head container (it stopped, vanished or restarted), else null.
  returned: always
  type: str
  sample: "container dgxspark-ray-head restarted (restart count 1)"
last_error:
  description: The last error of a Ray command while waiting (the cluster's view is then from the read before).
  returned: when a Ray command failed while waiting
  type: str
status_text:
  description: The text of C(ray status), for logs and failure messages.
  returned: when RV(reachable=true), O(wait_timeout=0) and O(detail=full)
  type: str
  sample: "======== Autoscaler status: ... ========\nNode status\n..."
"""

import time
import traceback
import typing as t

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker, _ray

try:
    import docker
    from docker.errors import DockerException, NotFound
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None


def container_env(attrs: dict[str, t.Any]) -> dict[str, str]:
    """The container's ``Config.Env`` as a dict."""
    env = {}
    for item in (attrs.get("Config") or {}).get("Env") or []:
        key, _sep, value = item.partition("=")
        env[key] = value
    return env


def exec_env(env: dict[str, str]) -> dict[str, str]:
    """What the Ray commands get: the auth mode and the token file path, when set."""
    return {key: env[key] for key in _ray.AUTH_ENV_VARS if env.get(key)}


def run_in_container(container, argv: list[str], env: dict[str, str], timeout: int) -> tuple[int, str, str]:
    """``docker exec`` with a time limit (``timeout`` from coreutils, present in every vLLM image)."""
    result = container.exec_run(["timeout", str(timeout)] + argv, environment=env, demux=True, stdin=False, tty=False)
    stdout, stderr = result.output if result.output else (None, None)
    return (result.exit_code, (stdout or b"").decode("utf-8", "replace"), (stderr or b"").decode("utf-8", "replace"))


class RayCommandError(Exception):
    pass


def _checked(container, argv, env, timeout) -> str:
    code, out, err = run_in_container(container, argv, env, timeout)
    if code != 0:
        detail = (err.strip() or out.strip() or "no output").splitlines()[-1]
        if code == 124:
            detail = f"no answer within {timeout}s"
        raise RayCommandError(f"`{' '.join(argv)}` failed in the head container (exit {code}): {detail}")
    return out


def collect(container, dashboard: str, timeout: int, detail: str = "full") -> dict[str, t.Any]:
    """Run the Ray commands in ``container`` and parse them into the module's result (DETAIL ``nodes``: the node list
    only, one command)."""
    env = exec_env(container_env(container.attrs))
    if detail == "nodes":
        nodes = _ray.parse_nodes(_checked(container, _ray.list_nodes_cmd(dashboard), env, timeout))
        return {"nodes": nodes, **_ray.summarise(nodes, None)}
    version = _ray.parse_version(_checked(container, _ray.RAY_VERSION_CMD, env, timeout))
    nodes = _ray.parse_nodes(_checked(container, _ray.list_nodes_cmd(dashboard), env, timeout))
    groups = _ray.parse_placement_groups(_checked(container, _ray.list_placement_groups_cmd(dashboard), env, timeout))
    status_text = _checked(container, _ray.RAY_STATUS_CMD, env, timeout)
    result = {"ray_version": version, "auth_mode": env.get("RAY_AUTH_MODE"), "nodes": nodes,
              "placement_groups": groups, "status_text": status_text}
    result.update(_ray.summarise(nodes, _ray.parse_status(status_text)))
    return result


def wait_verdict(summary: dict[str, t.Any] | None, nodes: int, gpus: float, node_ips: list[str]) -> tuple[bool, list[str]]:
    """(satisfied, missing node IPs) of a cluster summary against what the wait asks for."""
    if not summary:
        return False, sorted(node_ips)
    missing = sorted(set(node_ips) - set(summary.get("alive_node_ips") or []))
    satisfied = (summary.get("alive_nodes", 0) >= nodes and float(summary.get("gpus_total") or 0) >= gpus and not missing)
    return satisfied, missing


def container_state(container) -> dict[str, t.Any]:
    """Status, start time and restart count of a container (reloaded); status 'missing' when it is gone."""
    try:
        container.reload()
    except Exception:  # docker.errors.NotFound and API errors alike: the container is no longer usable
        return {"status": "missing", "started_at": None, "restart_count": None}
    attrs = container.attrs or {}
    return {"status": container.status, "started_at": (attrs.get("State") or {}).get("StartedAt"),
            "restart_count": attrs.get("RestartCount", 0)}


def ended_reason(name: str, state: dict[str, t.Any], started_at: str | None) -> str | None:
    """Why the watched head container no longer runs the instance the caller started, or None."""
    if state["status"] != "running":
        return f"container {name} is {state['status']}"
    if started_at and state["started_at"] != started_at:
        return f"container {name} restarted (restart count {state['restart_count']})"
    return None


def wait_for_cluster(container, name: str, params: dict[str, t.Any], clock=time.monotonic, sleep=time.sleep) -> dict[str, t.Any]:
    """Read the cluster until it is complete, the head container ends, or the deadline; never raises for Ray errors."""
    deadline = clock() + params["wait_timeout"]
    started_at = params.get("started_at") or container_state(container)["started_at"]
    env = exec_env(container_env(container.attrs))
    summary = None
    last_error = None
    ended = None
    start = clock()
    satisfied, missing = wait_verdict(summary, params["wait_nodes"], params["wait_gpus"], params["wait_node_ips"])
    while True:
        ended = ended_reason(name, container_state(container), started_at)
        if ended:
            break
        try:
            nodes = _ray.parse_nodes(_checked(container, _ray.list_nodes_cmd(params["dashboard_address"]), env,
                                              params["timeout"]))
            summary = _ray.summarise(nodes, None)
            summary["nodes"] = nodes
            last_error = None
        except (RayCommandError, _ray.RayParseError, DockerException) as exc:
            last_error = str(exc)
        satisfied, missing = wait_verdict(summary, params["wait_nodes"], params["wait_gpus"], params["wait_node_ips"])
        if satisfied or clock() >= deadline:
            break
        next_read = min(deadline, clock() + params["wait_interval"])
        while clock() < next_read:
            sleep(min(0.5, max(0.0, next_read - clock())))
            ended = ended_reason(name, container_state(container), started_at)
            if ended:
                break
        if ended:
            break
    result = {"wait_satisfied": satisfied and not ended, "missing_node_ips": missing, "container_ended": ended,
              "waited": round(clock() - start, 1), "snapshot": summary}
    if last_error:
        result["last_error"] = last_error
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "default": "dgxspark-ray-head"},
            "dashboard_address": {"type": "str", "default": "http://127.0.0.1:8265"},
            "docker_host": {"type": "str"},
            "timeout": {"type": "int", "default": 30},
            "fail_on_unreachable": {"type": "bool", "default": False},
            "wait_timeout": {"type": "int", "default": 0},
            "wait_nodes": {"type": "int", "default": 1},
            "wait_gpus": {"type": "float", "default": 0},
            "wait_node_ips": {"type": "list", "elements": "str", "default": []},
            "wait_interval": {"type": "float", "default": 3},
            "started_at": {"type": "str"},
            "detail": {"type": "str", "choices": ["full", "nodes"], "default": "full"},
        },
        supports_check_mode=True,
    )
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
    name = module.params["container"]
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    if module.params["wait_timeout"] < 0 or module.params["wait_interval"] <= 0:
        module.fail_json(msg=f"wait_timeout must be 0 or more and wait_interval more than 0 (got {module.params['wait_timeout']} "
                             f"and {module.params['wait_interval']})")
    waiting = module.params["wait_timeout"] > 0
    no_wait = {"wait_satisfied": False, "waited": 0.0, "container_ended": None,
               "missing_node_ips": sorted(module.params["wait_node_ips"])}

    client = _docker.client(module, docker, module.params["docker_host"])
    try:
        container = client.containers.get(name)
    except NotFound:
        container = None
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(module.params["docker_host"], exc),
                         exception=traceback.format_exc())

    info = {"name": name, "status": None, "id": None}
    unreachable = None
    if container is None:
        unreachable = f"container {name} does not exist on this node"
    else:
        info.update(status=container.status, id=container.short_id)
        if container.status != "running":
            unreachable = f"container {name} is {container.status}, not running"
    if unreachable:
        if module.params["fail_on_unreachable"]:
            module.fail_json(msg=unreachable + "; start the Ray head (the ray_cluster role) first",
                             reachable=False, container=info, **no_wait)
        module.exit_json(changed=False, reachable=False, msg=unreachable, container=info,
                         **{**no_wait, "container_ended": unreachable if waiting else None})

    if waiting:
        wait = wait_for_cluster(container, name, module.params)
        snapshot = wait.pop("snapshot")
        info["status"] = container_state(container)["status"]
        # Return the view the wait ended on: the nodes when it is satisfied (placement groups, `ray status` and the
        # version cost four more Ray commands and are read only without a wait), the last view otherwise, from which
        # the caller names the missing nodes.
        view = dict(snapshot or {}, reachable=snapshot is not None)
        if snapshot is None:
            view["msg"] = wait.get("last_error") or wait["container_ended"] or "the cluster could not be read"
        module.exit_json(changed=False, container=info, **view, **wait)
    error = None
    try:
        result = collect(container, module.params["dashboard_address"], module.params["timeout"],
                         module.params["detail"])
    except RayCommandError as exc:
        error = {"msg": str(exc)}
    except _ray.RayParseError as exc:
        error = {"msg": f"unexpected Ray output in {name}: {exc}"}
    except DockerException as exc:
        error = {"msg": f"docker exec into {name} failed: {exc}", "exception": traceback.format_exc()}
    if error:
        module.fail_json(reachable=True, container=info, **error, **no_wait)
    satisfied, missing = wait_verdict(result, module.params["wait_nodes"], module.params["wait_gpus"],
                                      module.params["wait_node_ips"])
    wait = {**no_wait, "wait_satisfied": satisfied, "missing_node_ips": missing}
    module.exit_json(changed=False, reachable=True, container=info, **result, **wait)


if __name__ == "__main__":
    main()
