# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the lookup dgxspark.vllm.node_program."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError

from ansible_collections.dgxspark.vllm.plugins.lookup.node_program import LookupModule
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_program import build


def test_returns_each_program_built_in_the_order_named():
    got = LookupModule().run(["dgxspark-transfer", "dgxspark-launch"], variables={})
    assert got == [build("dgxspark-transfer"), build("dgxspark-launch")]
    assert 'LAUNCHER_VERSION = "1.4.0"' in got[1]  # what hybrid_image's version check reads


def test_an_unknown_program_is_an_error_naming_the_known_ones():
    with pytest.raises(AnsibleLookupError, match="node_program: no node program 'dgxspark-x'; the collection builds "
                                                 "dgxspark-launch, dgxspark-transfer"):
        LookupModule().run(["dgxspark-x"], variables={})
