#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.source_image (it runs on the controller and runs
community.docker's modules on the node)."""

from __future__ import annotations

# The action plugin (plugins/action/source_image.py) declares supports_check_mode there (_supports_check_mode = True:
# community.docker's modules it runs report a pull that would happen and pull nothing); this file only documents it.

DOCUMENTATION = r"""
module: source_image
short_description: Make the image a deploy starts from present on a node, and record it by ID and digest
version_added: 0.16.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Checks O(image) and O(policy) first (a reference pinned by a malformed digest, an unknown policy), naming the host
    and the variable, before anything runs on the node.
  - Under O(policy), pulls the image with M(community.docker.docker_image_pull) - V(missing) only when the node lacks
    it, V(always) when the registry's tag points at a newer image - or, with V(never), looks for it with
    M(community.docker.docker_image_info) and stops, naming the fix, when the node lacks it.
  - Returns the record the release keeps of the source image - the reference, the image ID and the registry's digest
    under the reference's repository - in one step; it replaces the filter C(dgxspark.vllm.image_pulled) over the
    pull's result.
  - A failed pull stops the task naming the node, the image and what to check (reachability, a private registry's
    CA, a login), or the way around the registry (the image put on the node, O(policy=never)).
  - Changed only when it pulled a new image.
  - The P(dgxspark.vllm.image_pull#role) role, which the deploy playbooks run on each cluster's head, is this one step.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
options:
  image:
    description: The image (C(repository[:tag]) or C(repository@sha256:...)), the inventory's C(dgxspark_image).
    type: str
    required: true
  policy:
    description:
      - When to pull, the inventory's C(dgxspark_image_pull) - V(missing), V(always) or V(never).
      - Another value fails before anything runs on the node.
    type: str
    default: missing
  docker_host:
    description: The node's Docker daemon, when it is not community.docker's default.
    type: str
  publish:
    description: A variable to publish the record RV(image) as, a fact of this host (only when the task runs).
    type: str
attributes:
  check_mode:
    support: full
    details: community.docker's modules run in check mode - a pull that would happen is reported as a change, and
      nothing is pulled.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: With V(missing) or V(never), a second run changes nothing; with V(always), it changes only when the
      registry's tag moved to a newer image.
  platform:
    support: full
    platforms: posix
seealso:
  - module: community.docker.docker_image_pull
  - module: community.docker.docker_image_info
"""

EXAMPLES = r"""
- name: Make the source image present and record it
  dgxspark.vllm.source_image:
    image: nvcr.io/nvidia/vllm:26.01-py3
    policy: missing
    publish: image_pull_result

- name: Use only an image already on the node (a host with no registry access)
  dgxspark.vllm.source_image:
    image: registry.example.internal:5000/vllm/vllm-openai@sha256:8a3d0f4e1b2c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6
    policy: never
"""

RETURN = r"""
image:
  description: The record of the source image on this node.
  returned: success
  type: dict
  contains:
    image:
      description: The reference, as given.
      type: str
    id:
      description: The image ID (C(sha256:...)); empty in check mode for an image that would be pulled.
      type: str
    digest:
      description: The registry's digest under the reference's repository (C(repository@sha256:...)), empty for an
        image never pulled (one built or loaded on the node).
      type: str
    pulled:
      description: Whether this run pulled a new image (in check mode, would pull).
      type: bool
    policy:
      description: The policy applied.
      type: str
  sample: {image: "nvcr.io/nvidia/vllm:26.01-py3", id: "sha256:3f1e...", digest: "nvcr.io/nvidia/vllm@sha256:9b2c...",
           pulled: true, policy: missing}
"""
