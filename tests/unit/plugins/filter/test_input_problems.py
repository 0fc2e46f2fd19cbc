# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the input_problems filter: a role's own values checked as the fleet checks the inventory's."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.input_problems import FilterModule, input_problems


def test_good_and_unset_values_pass():
    assert input_problems({"hybrid_image_source": "lab/vllm-qwen35:0.17", "hybrid_image_base": "vllm-node",
                           "node_trust_dir": "", "dgxspark_api_key": None}, "spark-1") == []
    assert FilterModule().filters()["input_problems"] is input_problems


def test_each_bad_value_is_named_with_host_variable_and_fix():
    problems = input_problems({"hybrid_image_source": "lab/vllm:0.17\nRUN id", "hybrid_image_base": "vllm-node",
                               "node_trust_dir": "/root"}, "spark-2")
    assert len(problems) == 2
    assert problems[0].startswith("host spark-2: hybrid_image_source is 'lab/vllm:0.17\\nRUN id', not an image "
                                  "reference; set it to [registry[:port]/]repository[:tag]")
    assert problems[1].startswith("host spark-2: node_trust_dir is '/root', which is not a directory of the "
                                  "collection's own")


def test_a_variable_the_checks_do_not_know_needs_its_kind():
    with pytest.raises(AnsibleFilterError, match="no check for my_dir; give its kind"):
        input_problems({"my_dir": "/etc"}, "spark-1")
    assert input_problems({"my_dir": "/etc"}, "spark-1", kinds={"my_dir": "own_dir"})[0].startswith(
        "host spark-1: my_dir is '/etc'")
    with pytest.raises(AnsibleFilterError, match="no kind 'bogus'"):
        input_problems({"my_dir": "/etc"}, "spark-1", kinds={"my_dir": "bogus"})
    with pytest.raises(AnsibleFilterError, match="takes a dict"):
        input_problems(["/etc"], "spark-1")
