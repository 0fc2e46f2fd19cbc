#!/usr/bin/env python3
"""Ask the lab's serving endpoint one chat question and print the answer with its reasoning (make demo's last step)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
FABRIC = os.environ.get("DGXSPARK_LAB_FABRIC_SUBNET", "192.168.100.0/24").split("/")[0].rsplit(".", 1)[0]


def main() -> int:
    url = os.environ.get("DEMO_URL", f"http://{FABRIC}.11:8000")
    key = os.environ.get("DEMO_API_KEY", "lab-api-key-not-a-secret")
    question = " ".join(sys.argv[1:]) or "What do two DGX Sparks need to serve a 122B model together?"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the fabric is local: no proxy
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
