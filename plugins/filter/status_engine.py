# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine a cluster's head serves, from its release record and its containers (module_utils/_status.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: status_engine
short_description: The URL and model of the engine a cluster's head serves
version_added: 0.2.0
deprecated:
  why: The module M(dgxspark.vllm.status_info) reads the head's release, finds its engine and asks it in one call; no
    playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The module M(dgxspark.vllm.status_info) (its RV(dgxspark.vllm.status_info#module:engine)).
author:
- dgxspark.vllm maintainers
description:
- Reads the release record (C(release.json) on the head, as M(ansible.builtin.slurp) returned it, or the record
  itself) and returns the engine's base URL (the endpoint without C(/v1)) and served model name, when the record has
  an endpoint and the release's engine container (the Ray head's for the C(ray) backend, the mp container's
  otherwise) is among the head's containers. Otherwise returns an empty dict (the cluster is not serving).
positional: _input
options:
  _input:
    description: The M(ansible.builtin.slurp) result of C(release.json) (a missing file counts as no release), or the record.
    type: dict
    required: true
  containers:
    description: The head's containers, as M(community.docker.docker_host_info) lists them (C(containers)).
    type: list
    elements: dict
    required: true
  ray_head_container:
    description: The Ray head container's name.
    type: str
    default: dgxspark-ray-head
  mp_container:
    description: The mp backend's container name.
    type: str
    default: dgxspark-vllm
"""

EXAMPLES = r"""
- name: Take the engine's endpoint and model from the release
  ansible.builtin.set_fact:
    status_engine: "{{ status_release_raw | dgxspark.vllm.status_engine(containers=status_host.containers | default([])) }}"
"""

RETURN = r"""
_value:
  description:
    - C(url), the engine's own base URL as the head reaches it (without C(/v1); see P(dgxspark.vllm.engine_url#filter)),
      C(endpoint), the clients' (the release's URL without C(/v1)), and C(model); an empty dict when the head serves
      no engine.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _status


def status_engine(release, containers=None, ray_head_container=_status.RAY_HEAD_CONTAINER,
                  mp_container=_status.MP_CONTAINER):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.status_engine filter is deprecated: use the dgxspark.vllm.status_info "
                         "module, which reads the head's release and asks its engine in one call", version="1.0.0",
                         collection_name="dgxspark.vllm")
    if containers is not None and not isinstance(containers, (list, tuple)):
        raise AnsibleFilterError(f"status_engine: containers must be a list (docker_host_info's containers), is {containers!r}")
    try:
        return _status.engine(release, containers or [], ray_head_container=ray_head_container, mp_container=mp_container)
    except _status.StatusError as exc:
        raise AnsibleFilterError(f"status_engine: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"status_engine": status_engine}
