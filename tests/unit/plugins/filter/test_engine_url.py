# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's own URL on its head (plugins/filter/engine_url.py over module_utils/_release.py): what the head's
probes ask, past the door that stands on the clients' URL (security review M1)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.engine_url import engine_url
from ansible_collections.dgxspark.vllm.plugins.filter.gateway_door import gateway_door
from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


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


@pytest.mark.parametrize("bind, lan_ip, gateways, door_tls, url", [
    ("127.0.0.1", "10.0.0.11", False, True, "https://10.0.0.11:8000/v1"),  # the door for clients, over TLS
    ("127.0.0.1", "10.0.0.11", False, False, "http://10.0.0.11:8000/v1"),  # gateway_door_tls: false
    ("127.0.0.1", "10.0.0.11", True, True, "http://127.0.0.1:8000/v1"),    # behind gateways: the engine's own
    ("0.0.0.0", "10.0.0.11", False, True, "http://10.0.0.11:8000/v1"),     # the engine itself on the LAN
    ("::1", "fd00::11", False, "true", "https://[fd00::11]:8000/v1"),      # IPv6 bracketed
    ("::", "fd00::11", False, True, "http://[fd00::11]:8000/v1"),
    ("10.0.0.11", "10.0.0.11", False, True, "http://10.0.0.11:8000/v1"),
])
def test_one_producer_of_the_clients_url_for_the_release_and_the_door(bind, lan_ip, gateways, door_tls, url):
    """Found in the review of 96ffade: the release's URL (vllm_serve) and the one the door printed (the gateway role)
    were made by two Jinja expressions, which differed on an IPv6 address (the door's bracketed, the release's not).
    Both come from _release.clients_url now."""
    endpoint = _release.serving_endpoint(bind, 8000, lan_ip, gateways=gateways, door_tls=door_tls)
    assert endpoint == {"url": url, "host": bind, "port": 8000}
    if not gateways and bind in ("127.0.0.1", "::1"):  # the door stands for clients on the LAN address
        door = gateway_door({"endpoint": endpoint}, bind=lan_ip, port=8100, client_keys=["client-key-0001"],
                            engine_key="engine-key-0001", tls=door_tls in (True, "true"))
        assert door["url"] == url
