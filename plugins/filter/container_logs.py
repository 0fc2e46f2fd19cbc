# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that turns the fleet's log setting into community.docker.docker_container's log options."""

from __future__ import annotations

DOCUMENTATION = r"""
name: container_logs
short_description: The log driver and options of every long-running container the collection starts
version_added: 0.7.0
author:
  - dgxspark.vllm maintainers
description:
  - Docker's default log driver keeps a container's output in one file that grows without limit. The collection
    starts its engine ranks, gateways, doors, Prometheus, node exporters and watchdogs with the log driver and
    options this filter returns, from the fleet variable C(dgxspark_container_logs).
  - Unset or V({}), the driver is V(json-file) rotated at C(max-size) V(50m) and C(max-file) V(5) (at most 250 MB
    a container; C(docker logs) keeps working). With the V(json-file) driver, the given options go over these.
  - V(local) rotates by itself; V(journald), V(syslog) and the other collectors leave the rotation to the host's
    logging. V(json-file) without C(max-size) is refused, as are unknown drivers and malformed sizes.
positional: _input
options:
  _input:
    description: The value of C(dgxspark_container_logs), a mapping of C(driver) and C(options), or V(null).
    type: raw
    required: true
  field:
    description: Return only this key of the result (V(log_driver) or V(log_options)); all of it when unset.
    type: str
"""

EXAMPLES = r"""
- name: Start a container with the fleet's log rotation
  community.docker.docker_container:
    name: dgxspark-example
    image: example/image:1
    log_driver: "{{ dgxspark_container_logs | default(none) | dgxspark.vllm.container_logs('log_driver') }}"
    log_options: "{{ dgxspark_container_logs | default(none) | dgxspark.vllm.container_logs('log_options') }}"
"""

RETURN = r"""
_value:
  description: The options C(log_driver) and C(log_options) of C(community.docker.docker_container), or one of them
    when O(field) is set.
  type: raw
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._container_logs import VARIABLE, LogsError
from ansible_collections.dgxspark.vllm.plugins.module_utils._container_logs import container_logs as _logs


def container_logs(value, field=None):
    try:
        result = _logs(value)
    except LogsError as exc:
        raise AnsibleFilterError(f"{VARIABLE} {exc}") from exc
    if field is None:
        return result
    if field not in result:
        raise AnsibleFilterError(f"container_logs: field must be one of {', '.join(result)}, is {field!r}")
    return result[field]


class FilterModule:
    def filters(self):
        return {"container_logs": container_logs}
