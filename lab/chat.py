#!/usr/bin/env python3
"""Ask the lab's serving endpoint one chat question and print the answer with its reasoning (make demo's last step).

The endpoint is the first pair's head on the LAN, as a client on the controller's network reaches it: its
ansible_host in the lab inventory (the fabric is point to point between the two nodes of a pair). DEMO_URL overrides it.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
REPO = Path(__file__).resolve().parents[1]
INVENTORY = Path(os.environ.get("DGXSPARK_LAB_INVENTORY", REPO / "inventories" / "lab" /
                                ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")))


def head_url(inventory: Path, port: int = 8000) -> str:
    """https://<ansible_host of the first pair's head>:PORT (its door speaks TLS), from the lab inventory lab/lab.py
    wrote."""
    data = yaml.safe_load(inventory.read_text())
    pairs = data["all"]["children"]["spark_pairs"]["children"]
    for _pair, group in sorted(pairs.items()):
        for host, hostvars in (group.get("hosts") or {}).items():
            if (hostvars or {}).get("dgxspark_node_role") == "head":
                return f"https://{hostvars.get('ansible_host', host)}:{port}"
    raise SystemExit(f"chat.py: no pair with a head in {inventory}")


def main() -> int:
    url = os.environ.get("DEMO_URL") or head_url(INVENTORY)
    key = os.environ.get("DEMO_API_KEY", "lab-api-key-not-a-secret")
    question = " ".join(sys.argv[1:]) or "What do two DGX Sparks need to serve a 122B model together?"
    handlers = [urllib.request.ProxyHandler({})]  # the lab's LAN is local: no proxy
    if url.startswith("https://"):
        # What the README tells an operator: save the door's certificate, check its fingerprint against the one the
        # deploy printed, then trust it alone (DEMO_CA_FILE: a certificate saved before).
        parts = urllib.parse.urlsplit(url)
        ca_file = os.environ.get("DEMO_CA_FILE")
        pem = Path(ca_file).read_text() if ca_file else ssl.get_server_certificate((parts.hostname, parts.port or 443))
        digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).digest()
        print(f"certificate SHA-256 {':'.join(f'{b:02X}' for b in digest)} (check it against the deploy's line "
              "\"TLS certificate SHA-256\")")
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cadata=pem)))
    opener = urllib.request.build_opener(*handlers)
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
