#!/usr/bin/env python3
"""Ask the lab's serving endpoint one chat question and print the answer with its reasoning (make demo's last step).

The endpoint is the first pair's head on the LAN, as a client on the controller's network reaches it: its
ansible_host in the lab inventory (the fabric is point to point between the two nodes of a pair). DEMO_URL overrides it.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import yaml

PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
REPO = Path(__file__).resolve().parents[1]
INVENTORY = Path(os.environ.get("DGXSPARK_LAB_INVENTORY", REPO / "inventories" / "lab" /
                                ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")))


def head_url(inventory: Path, port: int = 8000) -> str:
    """http://<ansible_host of the first pair's head>:PORT, from the lab inventory lab/lab.py wrote."""
    data = yaml.safe_load(inventory.read_text())
    pairs = data["all"]["children"]["spark_pairs"]["children"]
    for _pair, group in sorted(pairs.items()):
        for host, hostvars in (group.get("hosts") or {}).items():
            if (hostvars or {}).get("dgxspark_node_role") == "head":
                return f"http://{hostvars.get('ansible_host', host)}:{port}"
    raise SystemExit(f"chat.py: no pair with a head in {inventory}")


def main() -> int:
    url = os.environ.get("DEMO_URL") or head_url(INVENTORY)
    key = os.environ.get("DEMO_API_KEY", "lab-api-key-not-a-secret")
    question = " ".join(sys.argv[1:]) or "What do two DGX Sparks need to serve a 122B model together?"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the lab's LAN is local: no proxy
    with opener.open(urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}),
                     timeout=30) as response:
        model = json.load(response)["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 64}
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with opener.open(request, timeout=120) as response:
        answer = json.load(response)
    message = answer["choices"][0]["message"]
    print(f"POST {url}/v1/chat/completions  model={model}")
    print(f"user:      {question}")
    print(f"reasoning: {message.get('reasoning_content') or message.get('reasoning')}")
    print(f"assistant: {message.get('content')}")
    print(f"usage:     {answer.get('usage')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
