# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the gateway_door filter's view of the engine's exposure."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.filter.gateway_door import gateway_door


def release(host):
    return {"endpoint": {"host": host, "port": 8000, "url": f"http://{host}:8000/v1"}}


@pytest.mark.parametrize(("host", "target", "on_lan"), [
    ("127.0.0.1", "127.0.0.1:8000", False),
    ("192.168.1.20", "192.168.1.20:8000", True),
    # Security review M3: a wildcard bind was reached on the loopback and so reported as off the LAN.
    ("0.0.0.0", "127.0.0.1:8000", True),
    ("::", "127.0.0.1:8000", True),
])
def test_m3_exposure_is_judged_on_the_address_the_engine_bound(host, target, on_lan):
    door = gateway_door(release(host), bind="192.168.1.20", port=8100, allowed=["192.168.1.5"],
                        engine_key="engine-key-0123456789")
    assert door["target"] == target and door["engine_on_lan"] is on_lan and door["engine_bind"] == f"{host}:8000"
