# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will the model fit a node's unified memory (its share of the weights) and its head's disk (the download)?"""

from __future__ import annotations

DOCUMENTATION = r"""
name: model_fit
short_description: Judge whether a model fits a node's unified memory and its cluster head's disk
version_added: 0.3.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the size of the model's checkpoint that M(dgxspark.vllm.model_checkpoint) read on the cluster's head
    before any download, and judges this node.
  - Memory (every node) - vLLM loads on each node its share of the weights, the checkpoint divided by TP x PP (times
    the node's GPUs), into a budget of O(utilization) x the node's memory (a GB10's GPU memory is the node's); it
    needs O(overhead_gib) beside the weights (activations, CUDA graphs, the CUDA context, some KV cache). A share
    plus overhead above the budget is an error naming the cluster, the model, the figures and the fixes (how many
    nodes would hold it, a smaller quantisation).
  - Disk (the head) - the weights not on the head yet, plus O(disk_headroom_gb), must fit the free space of the file
    system under O(models_dir).
  - A size that could not be read from the hub is an error on the head, naming the address, the answer and the fix.
positional: _input
options:
  _input:
    description: The registered result of M(dgxspark.vllm.model_checkpoint) on the cluster's head.
    type: dict
    required: true
  host:
    description: The node's name, put in front of each sentence.
    type: str
    required: true
  cluster:
    description: The node's cluster (its inventory group).
    type: str
    required: true
  model:
    description: The model (Hugging Face id).
    type: str
    required: true
  is_head:
    description: Whether the node is its cluster's head (the one that downloads).
    type: bool
    default: false
  tensor_parallel_size:
    description: The cluster's tensor parallel size.
    type: int
    default: 1
  pipeline_parallel_size:
    description: The cluster's pipeline parallel size.
    type: int
    default: 1
  gpus_per_node:
    description: GPUs per node (one GB10 on a DGX Spark).
    type: int
    default: 1
  utilization:
    description: vLLM's C(--gpu-memory-utilization).
    type: float
    default: 0.8
  memory_total_bytes:
    description: The node's memory (C(MemTotal), as M(dgxspark.vllm.node_facts) reads it); 0 skips the memory check.
    type: int
    default: 0
  overhead_gib:
    description: What vLLM needs on each GPU beside the weights, in GiB.
    type: float
    default: 8
  disk_headroom_gb:
    description: Bytes (GB) that must stay free on the head once the download is written.
    type: float
    default: 5
  models_dir:
    description: Where the weights go on the node.
    type: str
    default: /srv/dgxspark/models
"""

EXAMPLES = r"""
- name: Judge the model's fit on this node
  ansible.builtin.set_fact:
    fit: >-
      {{ hostvars[dgxspark_node.head].checkpoint | dgxspark.vllm.model_fit(host=inventory_hostname,
         cluster=dgxspark_node.cluster, model=dgxspark_model, is_head=dgxspark_node.is_head,
         tensor_parallel_size=2, utilization=0.8, memory_total_bytes=node.memory_total_bytes) }}
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    figures:
      description:
        - The figures judged, in bytes - C(total_bytes), C(source), C(share_bytes), C(overhead_bytes), C(need_bytes),
          C(memory_total_bytes), C(utilization), C(budget_bytes), C(fits_memory) and, on the head, C(disk)
          (C(path), C(free_bytes), C(download_bytes), C(need_bytes), C(fits)).
      type: dict
    errors:
      description: Sentences to stop on.
      type: list
      elements: str
    notes:
      description: Sentences saying what could not be judged.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._model_fit import GB, GIB, judge


def model_fit(checkpoint, host, cluster, model, is_head=False, tensor_parallel_size=1, pipeline_parallel_size=1,
              gpus_per_node=1, utilization=0.8, memory_total_bytes=0, overhead_gib=8, disk_headroom_gb=5,
              models_dir="/srv/dgxspark/models"):
    if not isinstance(checkpoint, dict):
        raise AnsibleFilterError(f"model_fit: expects the result of dgxspark.vllm.model_checkpoint, not {type(checkpoint).__name__}")
    try:
        return judge(checkpoint, host=str(host), cluster=str(cluster), model=str(model), is_head=bool(is_head),
                     tensor_parallel_size=int(tensor_parallel_size), pipeline_parallel_size=int(pipeline_parallel_size),
                     gpus_per_node=int(gpus_per_node), utilization=float(utilization),
                     memory_total=int(memory_total_bytes), overhead=int(float(overhead_gib) * GIB),
                     disk_headroom=int(float(disk_headroom_gb) * GB), models_dir=str(models_dir))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"model_fit: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"model_fit": model_fit}
