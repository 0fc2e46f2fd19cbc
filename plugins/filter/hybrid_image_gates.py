# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that judges the hybrid_image role's verification gates."""

from __future__ import annotations

DOCUMENTATION = r"""
name: hybrid_image_gates
short_description: Judge the three verification gates of a hybrid vLLM image from what the gate containers printed
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the registered results of the three gate commands of the P(dgxspark.vllm.hybrid_image#role) role and the
    M(dgxspark.vllm.vllm_image_info) result of the candidate image, and returns one record per gate with its verdict
    and, when it failed, the reason.
  - Gate (a) C(pip_check) passes when C(pip check) exits 0, or exits 1 and every conflict line it printed is either
    one the image the build starts from already printed (O(baseline), its own C(pip check); the gate judges what the
    build added) or listed in O(accept_conflicts) (compared after trimming spaces). Any other exit, or exit 1 without
    a conflict line, means C(pip check) could not run.
  - Gate (b) C(inspection) reads the last C(DGXSPARK_INSPECT <json>) line the inspection script printed and passes
    when it exited 0 and every architecture's model class loaded.
  - Gate (c) C(entrypoint) passes when C(docker run <image> version) printed O(launcher_version), the image's
    ENTRYPOINT is the launcher, and the image has the Ray the launcher needs (the version the build installed, else
    at least O(min_ray_version); no requirement when O(ray_install=never)).
positional: _input
options:
  _input:
    description: The registered result of the C(pip check) command (gate a).
    type: dict
    required: true
  inspection:
    description: The registered result of the inspection command (gate b).
    type: dict
    required: true
  entrypoint:
    description: The registered result of C(docker run <image> version) (gate c).
    type: dict
    required: true
  image:
    description: The registered result of M(dgxspark.vllm.vllm_image_info) for the candidate image.
    type: dict
    required: true
  baseline:
    description:
      - The registered result of C(pip check) in the image the build starts from (the overlay's source, the graft's
        base). Its conflict lines are the image's own and do not fail gate (a). When it could not run, no line counts
        as the image's own.
    type: dict
    required: false
  accept_conflicts:
    description: C(pip check) lines accepted as they are.
    type: list
    elements: str
    default: []
  launcher_version:
    description: The version the collection's launcher prints.
    type: str
    required: true
  ray_install:
    description: The role's Ray policy.
    type: str
    choices: [auto, always, never]
    required: true
  ray_added:
    description: The Ray requirement the build installed, or an empty string when it installed none.
    type: str
    default: ""
  ray_version:
    description: The Ray version the build installs.
    type: str
    required: true
  min_ray_version:
    description: The oldest Ray kept as it is.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Judge the gates
  ansible.builtin.set_fact:
    gates: >-
      {{ gate_pip | dgxspark.vllm.hybrid_image_gates(inspection=gate_inspection, entrypoint=gate_entrypoint,
         image=candidate_info, accept_conflicts=[], launcher_version='0.2.0', ray_install='auto', ray_added='',
         ray_version='2.54.1', min_ray_version='2.54.0') }}
"""

RETURN = r"""
_value:
  description: One record per gate, in the order the gates run.
  type: dict
  contains:
    pip_check:
      description: Gate (a).
      type: dict
      contains:
        gate: {description: The gate's letter, C(a)., type: str}
        passed: {description: Whether the gate passed., type: bool}
        conflicts: {description: The conflict lines C(pip check) printed., type: list, elements: str}
        accepted: {description: Those of them listed in O(accept_conflicts)., type: list, elements: str}
        inherited:
          description: Those of them the image the build starts from already had (O(baseline)); not counted.
          type: list
          elements: str
        baseline_error: {description: Why O(baseline) gave no lines to go by (empty when it ran or was not given)., type: str}
        requirements: {description: The requirements the conflicts not accepted name., type: list, elements: str}
        reason: {description: Why it failed (also set when it passed)., type: str}
    inspection:
      description: Gate (b).
      type: dict
      contains:
        gate: {description: The gate's letter, C(b)., type: str}
        passed: {description: Whether the gate passed., type: bool}
        architectures:
          description: One result per architecture (C(architecture), C(module), C(class), C(ok), C(error)).
          type: list
          elements: dict
        reason: {description: Why it failed., type: str}
    entrypoint:
      description: Gate (c).
      type: dict
      contains:
        gate: {description: The gate's letter, C(c)., type: str}
        passed: {description: Whether the gate passed., type: bool}
        output: {description: What C(docker run <image> version) printed (at most about 200 characters)., type: str}
        entrypoint: {description: The image's ENTRYPOINT., type: list, elements: str}
        ray: {description: The image's Ray version (null when it has none)., type: str}
        reason: {description: Why it failed (empty when it passed)., type: str}
  sample:
    pip_check: {gate: a, passed: true, conflicts: [], accepted: [], inherited: [], baseline_error: "", requirements: [],
                reason: "0 conflict(s) not accepted: ..."}
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._hybrid_gates import judge


def hybrid_image_gates(pip_check, inspection, entrypoint, image, launcher_version, ray_install, ray_version,
                       min_ray_version, accept_conflicts=None, ray_added="", baseline=None):
    for name, value in (("_input", pip_check), ("inspection", inspection), ("entrypoint", entrypoint),
                        ("image", image)):
        if not isinstance(value, dict):
            raise AnsibleFilterError(f"hybrid_image_gates: {name} must be a registered result (a dict),"
                                     f" got {type(value).__name__}")
    if baseline is not None and not isinstance(baseline, dict):
        raise AnsibleFilterError(f"hybrid_image_gates: baseline must be a registered result (a dict), got {type(baseline).__name__}")
    if ray_install not in ("auto", "always", "never"):
        raise AnsibleFilterError(f"hybrid_image_gates: ray_install must be auto, always or never (is {ray_install!r})")
    try:
        return judge(dict(pip_check), dict(inspection), dict(entrypoint), dict(image), list(accept_conflicts or []),
                     str(launcher_version), ray_install, str(ray_added or ""), str(ray_version), str(min_ray_version),
                     dict(baseline) if baseline else None)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"hybrid_image_gates: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"hybrid_image_gates": hybrid_image_gates}
