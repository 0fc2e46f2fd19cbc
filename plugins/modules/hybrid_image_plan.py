#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.hybrid_image_plan (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/hybrid_image_plan.py) runs on the controller and declares supports_check_mode there
# (_supports_check_mode = True: its reads on the build host change nothing, and the pull it may run reports what it
# would pull in check mode); this file only documents it.

DOCUMENTATION = r"""
module: hybrid_image_plan
short_description: Check a hybrid image's inputs, inspect the images it starts from and derive its content tag
version_added: 0.17.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The first step of the P(dgxspark.vllm.hybrid_image#role) role, on its build host.
  - Checks every input before anything reaches the build host, each problem a sentence naming the host, the variable
    and the fix - the images the Dockerfile starts FROM by the grammar M(dgxspark.vllm.fleet) checks the inventory's
    images with.
  - Reads the launcher on the controller (the collection's C(dgxspark-launch), or O(launcher)) and its version.
  - Pulls the images when O(pull) asks, inspects them with M(dgxspark.vllm.vllm_image_info) (files only, no
    container started; the architectures the gates check are the model's own when O(model_dir) names its
    C(config.json)) and lists the wheelhouse.
  - Decides whether the image gets Ray, and checks the hashed lock it is installed from.
  - Derives the image's inputs and its content tag, their hash - the tag the role's Jinja derived before 0.17.0 from
    the same inputs, so an upgrade rebuilds no image - and looks for the image under it. The image is reused only
    when its ID is the one O(record) holds for the tag (the gates passed on this node).
  - Publishes what the role's build reads (C(hybrid_image_content_tag), C(hybrid_image_inputs_sha256),
    C(hybrid_image_from), C(hybrid_image_from_info), C(hybrid_image_pip_requirements), ...).
  - It replaces eleven of the role's tasks (three asserts, four C(set_fact), two inspections, a pull and a C(find))
    and the filters C(dgxspark.vllm.input_problems) and C(dgxspark.vllm.pip_lock_problems).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  strategy:
    description:
      - C(hybrid_image_strategy) - V(overlay) (the source image extended) or V(graft) (the source's files copied into
        O(base)).
    type: str
    default: overlay
  source:
    description:
      - C(hybrid_image_source) - the image whose vLLM the hybrid serves.
    type: str
    required: true
  base:
    description:
      - C(hybrid_image_base) - the image a graft copies the source's files into.
    type: str
    default: ""
  pull:
    description:
      - C(hybrid_image_pull) - pull O(source) (and O(base)) when missing, with M(community.docker.docker_image_pull).
    type: bool
    default: false
  repository:
    description:
      - C(hybrid_image_repository) - the repository of the content tag.
    type: str
    required: true
  tag:
    description:
      - C(hybrid_image_tag) - the alias tag (checked here, set by the role).
    type: str
    default: ""
  graft_files:
    description:
      - C(hybrid_image_graft_files) - the source's files a graft copies.
    type: list
    elements: str
    default: []
  registry_entries:
    description:
      - C(hybrid_image_registry_entries) - the model registry entries a graft adds.
    type: list
    elements: raw
    default: []
  config_entries:
    description:
      - C(hybrid_image_config_entries) - the config classes a graft registers.
    type: list
    elements: raw
    default: []
  pip_install:
    description:
      - C(hybrid_image_pip_install) - more pip requirements.
    type: list
    elements: str
    default: []
  pip_cert:
    description:
      - C(hybrid_image_pip_cert) - a CA bundle for pip (only whether one is given is an input).
    type: str
    default: ""
  pip_wheelhouse:
    description:
      - C(hybrid_image_pip_wheelhouse) - a directory of wheels on the build host; listed here, it must hold files.
    type: str
    default: ""
  ray_install:
    description:
      - C(hybrid_image_ray_install) - V(auto) (when the image has no Ray, or one older than O(min_ray_version)),
        V(always) or V(never).
    type: str
    default: auto
  ray_version:
    description:
      - C(hybrid_image_ray_version) - the Ray the image gets.
    type: str
    required: true
  min_ray_version:
    description:
      - C(hybrid_image_min_ray_version) - the oldest Ray kept with V(auto) (compared loosely, as Ansible's C(version)
        test does).
    type: raw
    required: true
  ray_extras:
    description:
      - C(hybrid_image_ray_extras) - Ray's extras.
    type: list
    elements: str
    default: []
  ray_lock:
    description:
      - C(hybrid_image_ray_lock) - the hashed lock Ray is installed from, a file on the controller; it must pin Ray at
        O(ray_version).
    type: str
    required: true
  launcher:
    description:
      - C(hybrid_image_launcher) - a launcher file on the controller; empty for the collection's C(dgxspark-launch).
    type: str
    default: ""
  architectures:
    description:
      - C(hybrid_image_architectures) - the architectures the gates check when the model declares none.
    type: list
    elements: str
    required: true
  model_dir:
    description:
      - C(hybrid_image_model_dir) - the model's directory on the build host, whose C(config.json) names its
        architectures.
    type: str
    default: ""
  accept_conflicts:
    description:
      - C(hybrid_image_accept_conflicts) - the pip conflicts the gates accept.
    type: raw
    default: []
  verify:
    description:
      - C(hybrid_image_verify) - whether the gates run (an unverified image has a tag of its own).
    type: bool
    default: true
  record:
    description:
      - C(hybrid_image_record) - the file on the build host that records the images verified there.
    type: str
    required: true
  recipe:
    description:
      - The role's Dockerfile template on the controller (its hash is an input).
    type: str
    required: true
seealso:
  - module: dgxspark.vllm.vllm_image_info
"""

EXAMPLES = r"""
- name: Check the inputs, inspect the images the build starts from and derive the image's content tag
  dgxspark.vllm.hybrid_image_plan:
    source: hellohal2064/vllm-qwen3.5-gb10
    repository: dgxspark/vllm-hybrid
    ray_version: "2.54.1"
    min_ray_version: "2.54.0"
    ray_lock: "{{ role_path }}/files/ray-2.54.1.txt"
    architectures: [Qwen3_5MoeForConditionalGeneration]
    record: /var/lib/dgxspark/verified-images.json
    recipe: "{{ role_path }}/templates/Dockerfile.j2"
  register: hybrid_image_plan
"""

RETURN = r"""
image:
  description: The content tag of the image these inputs make.
  returned: success
  type: str
  sample: dgxspark/vllm-hybrid:overlay-3f2a9c0d1e4b
inputs_sha256:
  description: The SHA-256 of the inputs (the tag holds its first 12 digits).
  returned: success
  type: str
reuse:
  description: Whether the image under the tag is the one verified on this node (nothing to build).
  returned: success
  type: bool
exists:
  description: Whether an image is under the tag.
  returned: success
  type: bool
id:
  description: Its ID, when one is.
  returned: success
  type: str
recorded_id:
  description: The ID O(record) holds for the tag.
  returned: success
  type: str
pulled:
  description: The images pulled.
  returned: success
  type: list
  elements: str
"""
