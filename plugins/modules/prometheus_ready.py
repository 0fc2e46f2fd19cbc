#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.prometheus_ready."""

from __future__ import annotations

DOCUMENTATION = r"""
module: prometheus_ready
short_description: Have the running Prometheus load its configuration again (SIGHUP, no restart) and wait until it has
version_added: 0.17.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the host of the Prometheus the P(dgxspark.vllm.monitoring#role) role runs, in one call. With O(reload), it
    reads when Prometheus last loaded its configuration (its own C(/metrics)), sends its container C(SIGHUP) (it
    reloads; nothing restarts), and waits until a later load succeeded. Without it, it waits until Prometheus answers
    with its configuration loaded (a container just started).
  - Prometheus is asked at its listening address, the loopback when it listens on every address (V(0.0.0.0), V(::)),
    the same URL M(dgxspark.vllm.monitoring_info) asks; the address and the port are checked first.
  - A configuration Prometheus refused, or no answer within O(timeout), fails naming the container and where its
    reason is.
  - It replaces the role's C(/metrics) reads, its C(docker kill) and the Jinja that compared the two load times.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.prometheus
attributes:
  check_mode:
    support: full
    details: With O(reload), reports C(changed) and sends no signal; it waits for nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Without O(reload) it changes nothing; with it, each call sends one signal (the role asks only when the configuration changed).
  platform:
    support: full
    platforms: posix
options:
  container:
    description: Its container (C(monitoring_prometheus_container)), which O(reload) signals.
    type: str
    required: true
  reload:
    description:
      - Send the running container C(SIGHUP) and wait for a load after it. The role asks for it when the configuration
        files changed and the container did not (a container just created or started reads them as it starts).
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the load.
    type: int
    default: 30
seealso:
  - module: dgxspark.vllm.monitoring_info
"""

EXAMPLES = r"""
- name: Have Prometheus load its new configuration
  dgxspark.vllm.prometheus_ready:
    listen: "{{ monitoring_prometheus_listen }}"
    port: "{{ monitoring_prometheus_port }}"
    container: "{{ monitoring_prometheus_container }}"
    reload: "{{ monitoring_files_result is changed and monitoring_container is not changed }}"
  register: monitoring_prometheus
"""

RETURN = r"""
url:
  description: The API's base URL, as its host reaches it.
  returned: always
  type: str
  sample: http://127.0.0.1:9090
reloaded:
  description: Whether C(SIGHUP) was sent (in check mode, whether it would be).
  returned: always
  type: bool
loaded_at:
  description: When Prometheus last loaded its configuration (seconds since the epoch); C(-1) in check mode.
  returned: always
  type: float
"""

import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _monitoring, _status

CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **_monitoring.ARGUMENT_SPEC,
            "container": {"type": "str", "required": True},
            "reload": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not CONTAINER_RE.match(p["container"]):
        module.fail_json(msg=f"monitoring_prometheus_container is {p['container']!r}: give a container name (letters, "
                             "digits, '_', '.' and '-')")
    if p["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {p['timeout']}")
    try:
        url = _monitoring.api_url(p["listen"], p["port"])
    except (ValueError, TypeError) as exc:
        module.fail_json(msg=f"monitoring_prometheus_listen / monitoring_prometheus_port: {exc}")
    if module.check_mode:
        module.exit_json(changed=p["reload"], url=url, reloaded=p["reload"], loaded_at=-1.0)
    after = -1.0
    if p["reload"]:
        code, text = _status.http_get(f"{url}/metrics", 10.0)
        after = _monitoring.loaded(text)[1] if code == 200 else -1.0
        rc, out, err = module.run_command(["docker", "kill", "--signal", "HUP", p["container"]])
        if rc != 0:
            module.fail_json(msg=f"SIGHUP to Prometheus's container {p['container']} failed ({rc}): {err or out}; "
                                 "is it running (`docker ps -a` on this host)?")
    try:
        at = _monitoring.wait_loaded(url, after=after, get=_status.http_get, timeout=float(p["timeout"]),
                                     clock=time.monotonic, sleep=time.sleep, container=p["container"])
    except _monitoring.MonitoringError as exc:
        module.fail_json(msg=str(exc), url=url, reloaded=p["reload"])
    module.exit_json(changed=p["reload"], url=url, reloaded=p["reload"], loaded_at=at)


if __name__ == "__main__":
    main()
