"""Images come from a registry (issue 33, 2). A fresh DGX OS install has no image: the lab's registry (lab.py registry,
Debian's docker-registry on the LAN, TLS with the lab's CA the nodes trust) holds the source image, and the nodes
start without it. At 13f6075 nothing pulled dgxspark_image: it reached a head only because the model download happened
to `docker run` it, so with the weights already on the nodes the deploy stopped ("... is not present").

Each test starts from a pair with the weights on both nodes and none of the images (the serving containers torn down,
the source and serving images removed), deploys with the mp backend and the stand-in model, and tears down.

DGXSPARK_TEST_AS_OF=<commit> runs the same tests with that commit's playbooks and roles (labkit.collection_as_it_was):
with 13f6075 each fails, as the field did.
"""

from __future__ import annotations

import json
import os

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, api_url, collection_as_it_was, image_inspect, node, \
    node_exec, run

pytestmark = pytest.mark.lab_minutes(4)  # labkit: the order files are handed out

SOURCE = "lab/vllm-qwen35:0.17"
MP = ["-e", "vllm_serve_backend=mp"]
AS_OF = os.environ.get("DGXSPARK_TEST_AS_OF", "")


@pytest.fixture(scope="module")
def registry(lab, tmp_path_factory):
    """The lab's registry with the source image pushed: {"ref": address/image:tag, "digest": address/repo@sha256}.
    The inventory names the registry's reference (dgxspark_image) while it runs."""
    run([*LAB, "registry", "start"])
    run([*LAB, "registry", "push", SOURCE])
    digest = run([*LAB, "registry", "digest", SOURCE]).stdout.strip()
    ref = run([*LAB, "registry", "ref", SOURCE]).stdout.strip()
    assert digest.startswith(ref.rsplit(":", 1)[0] + "@sha256:"), (ref, digest)
    root, env = (collection_as_it_was(tmp_path_factory.mktemp("as-of"), commit=AS_OF) if AS_OF
                 else (REPO, ansible_env()))
    yield {"ref": ref, "digest": digest, "root": root, "env": env}
    playbook("teardown.yml", {"root": REPO, "env": ansible_env()})
    run([*LAB, "registry", "stop"])


def playbook(name, registry, *args):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(registry["root"] / "playbooks" / name), *args],
               check=False, env=registry["env"], timeout=1500)


def fresh_pair(registry):
    """Both nodes without any engine container and without the source and serving images (the weights stay)."""
    down = playbook("teardown.yml", {"root": REPO, "env": ansible_env()})
    assert down.returncode == 0, down.stdout[-3000:]
    repository = registry["ref"].rsplit(":", 1)[0]
    for i in (1, 2):
        listed = node_exec(node(i), "docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        names = [n for n in listed if n.rsplit(":", 1)[0] in (repository, "dgxspark/vllm-hybrid", SOURCE.split(":", maxsplit=1)[0])]
        digests = node_exec(node(i), "docker", "image", "ls", "--digests", "--format", "{{.Repository}}@{{.Digest}}",
                            repository).stdout.split()
        if names or digests:
            node_exec(node(i), "docker", "image", "rm", "-f", *names, *[d for d in digests if "<none>" not in d],
                      check=False)
        node_exec(node(i), "docker", "image", "prune", "-f")
        assert image_inspect(i, registry["ref"]) is None and image_inspect(i, SOURCE) is None
        # The weights are there: nothing downloads (the lab has no model hub), nothing runs the image by accident.
        assert node_exec(node(i), "test", "-s", "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8/config.json",
                         check=False).returncode == 0


def recap(proc, host):
    line = next(line for line in proc.stdout.splitlines() if line.startswith(host + " ") and "ok=" in line)
    return dict(item.split("=") for item in line.split(":", 1)[1].split())


def release(i=1):
    return json.loads(node_exec(node(i), "cat", "/etc/dgxspark/vllm/release.json").stdout)


def test_field_image_only_in_registry_is_pulled_when_weights_are_present(registry):
    """The weights on both nodes, the image only in the registry: the head pulls it (once), builds the serving image
    from it and sends that to the worker over the fabric; the worker never pulls. The release records the digest."""
    fresh_pair(registry)
    proc = playbook("deploy_qwen35.yml", registry, *MP)
    assert proc.returncode == 0, "\n".join(line for line in proc.stdout.splitlines() if "fatal" in line or "msg:" in line)[-5000:]
    flat = " ".join(proc.stdout.split())
    assert f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}" in flat
    head = image_inspect(1, registry["ref"])
    assert head is not None and registry["digest"] in head["RepoDigests"], head
    assert image_inspect(2, registry["ref"]) is None  # the worker got the serving image over the fabric, not a pull
    source = release()["source"]
    assert source == {"image": registry["ref"], "id": head["Id"], "digest": registry["digest"]}, source


@pytest.mark.slow  # two deploys: the pull of a tag, its transfer and the record run in make test (the weights-present test)
def test_field_digest_pinned_image_deploys(registry):
    """dgxspark_image pinned by digest (name@sha256:...): pulled by digest, built FROM it, synced, served, recorded;
    a second deploy changes nothing."""
    fresh_pair(registry)
    pinned = ["-e", f"dgxspark_image={registry['digest']}"]
    first = playbook("deploy_qwen35.yml", registry, *MP, *pinned)
    assert first.returncode == 0, first.stdout[-5000:]
    assert f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1" in " ".join(first.stdout.split())
    head = image_inspect(1, registry["digest"])
    assert head is not None and image_inspect(2, registry["digest"]) is None
    assert release()["source"] == {"image": registry["digest"], "id": head["Id"], "digest": registry["digest"]}
    engine = node_exec(node(2), "docker", "inspect", "-f", "{{.Config.Image}}", "dgxspark-vllm").stdout.strip()
    assert engine.startswith("sha256:"), engine
    second = playbook("deploy_qwen35.yml", registry, *MP, *pinned)
    assert second.returncode == 0, second.stdout[-5000:]
    changed = [block.split("]", 1)[0] for block in second.stdout.split("\nTASK [")[1:] if "\nchanged: [" in block]
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0", changed


def test_field_image_absent_with_pull_never_stops_before_the_download_naming_the_fix(registry):
    """dgxspark_image_pull=never on a node without the image: the first play after the preflight stops the head,
    naming it, the image and the fix; nothing is pulled, built or started on either node."""
    fresh_pair(registry)
    proc = playbook("deploy_qwen35.yml", registry, *MP, "-e", "dgxspark_image_pull=never")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert (f"{node(1)}: the image {registry['ref']} (dgxspark_image) is not on this node, and dgxspark_image_pull is "
            "never, so nothing pulls it") in flat, flat[-3000:]
    assert "dgxspark_image_pull: missing" in flat
    assert recap(proc, node(1))["failed"] == "1"
    assert image_inspect(1, registry["ref"]) is None
    for i in (1, 2):
        assert node_exec(node(i), "docker", "ps", "-aq").stdout.split() == []
        assert node_exec(node(i), "docker", "image", "ls", "-q", "dgxspark/vllm-hybrid").stdout.split() == []
