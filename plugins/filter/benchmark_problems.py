# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that checks the benchmark role's settings (module_utils/_benchmark), before anything runs."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _benchmark

DOCUMENTATION = r"""
name: benchmark_problems
short_description: Check the benchmark's settings, one sentence a problem naming host, variable and fix
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the role C(dgxspark.vllm.benchmark)'s settings (without the C(benchmark_) prefix) and returns one sentence
    a problem; empty when every value is good. The concurrency sweep may be a list or a comma-separated string.
positional: _input, host
options:
  _input:
    description: >-
      concurrency, prompt_tokens, output_tokens, runs, step_timeout, timeout, regression_threshold and book_url.
    type: dict
    required: true
  host:
    description: The host named in each problem.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the settings
  vars:
    problems: "{{ {'concurrency': benchmark_concurrency, 'runs': benchmark_runs} | dgxspark.vllm.benchmark_problems(inventory_hostname) }}"
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' | ') }}"
"""

RETURN = r"""
_value:
  description: One sentence a problem; empty when the settings are good.
  type: list
  elements: str
  sample: ["spark-1: benchmark_runs must be a whole number from 1 to 100, is 0"]
"""


def benchmark_problems(settings, host):
    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"benchmark_problems: the settings must be a dict, are {type(settings).__name__}")
    return [f"{host}: {problem}" for problem in _benchmark.check_settings(settings)]


class FilterModule:
    def filters(self):
        return {"benchmark_problems": benchmark_problems}
