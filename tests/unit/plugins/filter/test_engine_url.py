# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's own URL on its head (plugins/filter/engine_url.py over module_utils/_release.py): what the head's
probes ask, past the door that stands on the clients' URL (security review M1)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.engine_url import engine_url


@pytest.mark.parametrize("host,port,url", [
    ("127.0.0.1", 8000, "http://127.0.0.1:8000"),      # behind the door (the default)
    ("0.0.0.0", 8001, "http://127.0.0.1:8001"),        # every address: the loopback is one
    ("::", 8000, "http://[::1]:8000"),
    ("::1", 8000, "http://[::1]:8000"),
    ("10.0.0.11", "8000", "http://10.0.0.11:8000"),    # one address: that one
])
def test_the_head_reaches_its_engine_where_it_is_bound_not_through_the_door(host, port, url):
    release = {"endpoint": {"url": "http://10.0.0.11:8000/v1", "host": host, "port": port}}
    assert engine_url(release) == url


def test_no_endpoint_is_no_url_and_a_bad_one_is_named():
    assert engine_url({}) == "" and engine_url({"endpoint": {}}) == ""
    with pytest.raises(AnsibleFilterError, match="^engine_url: the release's endpoint has no address and port"):
        engine_url({"endpoint": {"host": "head.lan", "port": 8000}})
    with pytest.raises(AnsibleFilterError, match="^engine_url: the release must be a dict"):
        engine_url("release.json")
