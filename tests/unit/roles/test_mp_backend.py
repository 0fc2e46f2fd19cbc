# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mp backend stands on its own: its task file includes nothing of the ray_cluster role and reads none of its
settings (the engine containers' settings are the node's, dgxspark_node.engine). At a3ec59b mp.yml included
ray_cluster's launcher tasks and read eight ray_cluster_* settings."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_mp_backend_includes_no_ray_task_and_reads_no_ray_setting():
    text = (ROOT / "roles" / "vllm_serve" / "tasks" / "mp.yml").read_text()
    assert "dgxspark.vllm.ray_cluster" not in text
    # A place of the layout registry may carry the role's name (the launcher's directory); a variable may not.
    variables = set(re.findall(r"(?<!['\w])ray_cluster_\w+", text))
    assert variables == set(), variables
    assert 'engine: "{{ dgxspark_node.engine }}"' in text  # the neutral engine settings, read by engine_spec
