# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's layout on a node: every directory and file of its own, and its engine containers' names, by the
variable that moves each one (issue 35).

The roles own their defaults (defaults/main.yml holds these very values, which a unit test compares); a role or a
playbook that reads another role's place asks ``lookup('dgxspark.vllm.layout', name)``, which answers the inventory's
value where it sets one and this registry's otherwise. No path of the collection is written twice.

Every directory and file the roles make lies in one of TREES (a unit test walks the roles' defaults), so teardown,
the deploy record and a reviewer know where to look.
"""

from __future__ import annotations

# Directories and files: the variable that moves each, and its place when the inventory does not.
PATHS = {
    "dgxspark_models_dir": "/srv/dgxspark/models",
    "vllm_serve_config_dir": "/etc/dgxspark/vllm",
    "ray_cluster_config_dir": "/etc/dgxspark/ray",
    "ray_cluster_launcher_dir": "/opt/dgxspark/bin",
    "node_trust_dir": "/etc/dgxspark/transfer",
    "node_trust_authorized_keys": "/root/.ssh/authorized_keys",
    "model_sync_hf_token_dir": "/etc/dgxspark/hf",
    "hybrid_image_record": "/var/lib/dgxspark/verified-images.json",
    "hybrid_image_build_dir": "/var/tmp/dgxspark-hybrid",
    "watchdog_config_dir": "/etc/dgxspark/watchdog",
    "watchdog_state_dir": "/var/lib/dgxspark/watchdog",
    "gateway_config_dir": "/etc/dgxspark/gateway",
    "gateway_door_config_dir": "/etc/dgxspark/gateway-door",
    "gateway_run_dir": "/var/lib/dgxspark/gateway",
    "monitoring_config_dir": "/etc/dgxspark/monitoring",
    "monitoring_data_dir": "/var/lib/dgxspark/prometheus",
    "dgxspark_metrics_dir": "/var/lib/prometheus/node-exporter",
    "deploy_state_path": "/var/lib/dgxspark/deploy/record.json",
}

# The engine containers (the Ray head and workers, an mp rank): what status, teardown and the watchdog look for.
CONTAINERS = {
    "ray_cluster_head_container": "dgxspark-ray-head",
    "ray_cluster_worker_container": "dgxspark-ray-worker",
    "vllm_serve_mp_container": "dgxspark-vllm",
}

LAYOUT = {**PATHS, **CONTAINERS}

# Where an engine container finds what the roles bind into it: fixed places inside the container, which no variable
# moves (the node's side is the owning role's config directory). The launcher reads them there.
IN_CONTAINER = {
    "engine_serve_env": "/etc/dgxspark/vllm/serve.env",  # the serving environment (the API key), on the head
    "engine_ray_token": "/etc/dgxspark/ray/auth_token",  # the cluster's Ray token
}

# The trees the collection's own directories and files lie in. The node exporter's textfile directory and root's
# authorized_keys are shared with the system: the collection writes one file (one line) of its own there.
TREES = ("/etc/dgxspark", "/var/lib/dgxspark", "/srv/dgxspark", "/opt/dgxspark", "/var/tmp/dgxspark-hybrid")
SHARED = ("/var/lib/prometheus/node-exporter", "/root/.ssh/authorized_keys")

# What the deploy record (dgxspark.vllm.deploy_record) captures of them whole, and why the others are not.
RECORDED = ("/etc/dgxspark", "/var/lib/dgxspark", "/opt/dgxspark")
NOT_RECORDED = {
    "/srv/dgxspark": "the weights: the record holds the model's files by size and time (deploy_state_model_dir)",
    "/var/tmp/dgxspark-hybrid": "the image build's scratch directory: the built image is recorded by its ID",
    "/var/lib/prometheus/node-exporter": "the node exporter's metrics, which the watchdog rewrites while it serves",
    "/root/.ssh/authorized_keys": "recorded as one file (deploy_state_files)",
}
# What changes on its own in a recorded tree while a cluster serves: the watchdog's state, lock and events, the
# gateway's runtime sockets and Prometheus' data. The watchdog's maintenance marker is not among them: a paused
# watchdog is a difference.
_WATCHDOG_STATE = ("state.json", "lock", "events.jsonl", "events.jsonl.1")
CHANGING = tuple(f"{PATHS['watchdog_state_dir']}/{name}" for name in _WATCHDOG_STATE) + (
    PATHS["gateway_run_dir"], PATHS["monitoring_data_dir"])


class LayoutError(KeyError):
    """A name the layout does not hold."""


def place(name: str, given=None) -> str:
    """NAME's place: GIVEN (the inventory's value) when it is set, else the registry's; an IN_CONTAINER place is
    fixed (GIVEN is ignored)."""
    if name in IN_CONTAINER:
        return IN_CONTAINER[name]
    if name not in LAYOUT:
        raise LayoutError(f"{name!r} is not in the collection's layout (it holds "
                          f"{', '.join(sorted([*LAYOUT, *IN_CONTAINER]))})")
    return str(given) if given not in (None, "") else LAYOUT[name]


def in_trees(path: str) -> bool:
    """Whether PATH lies in one of TREES, or is one of the SHARED places."""
    text = str(path).rstrip("/")
    return any(text == tree or text.startswith(tree + "/") for tree in TREES) or any(
        text == shared or text.startswith(shared + "/") for shared in SHARED)
