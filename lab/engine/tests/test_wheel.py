"""The wheels: real dist-info, installable by pip, and `pip check` reports real conflicts."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile

import build_wheel
import pytest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheels")
    return {f: build_wheel.build_wheel(f, out) for f in ("0.14", "0.17")}


def _meta(whl, version):
    with zipfile.ZipFile(whl) as zf:
        return zf.read(f"vllm-{version}.dist-info/METADATA").decode(), zf


def test_metadata(wheels):
    meta, _ = _meta(wheels["0.14"], "0.14.1")
    lines = meta.split("\n\n")[0].splitlines()
    assert "Name: vllm" in lines and "Version: 0.14.1" in lines
    assert "Requires-Python: <3.14,>=3.10" in lines
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    assert "transformers<5,>=4.56.0" in requires and "ray[cgraph]>=2.48.0" in requires
    assert "protobuf>=6.30.0" in requires and "tokenizers>=0.21.1" in requires
    assert not any(r.startswith(("torch", "flashinfer", "xgrammar", "fastapi")) for r in requires)
    meta17, _ = _meta(wheels["0.17"], "0.17.1")
    req17 = [line.removeprefix("Requires-Dist: ") for line in meta17.split("\n\n")[0].splitlines()
             if line.startswith("Requires-Dist: ")]
    assert "transformers<5,>=4.56.0" in req17 and not any(r.startswith("ray") for r in req17)
    assert "Version: 0.17.1" in meta17


def test_record_and_entry_point(wheels):
    with zipfile.ZipFile(wheels["0.17"]) as zf:
        names = set(zf.namelist())
        assert "vllm/model_executor/models/qwen3_5.py" in names
        assert "vllm/transformers_utils/configs/qwen3_5_moe.py" in names
        eps = zf.read("vllm-0.17.1.dist-info/entry_points.txt").decode()
        assert "[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n" == eps
        record = zf.read("vllm-0.17.1.dist-info/RECORD").decode().splitlines()
        for row in record:
            name, digest, size = row.rsplit(",", 2)
            if name.endswith("RECORD"):
                continue
            data = zf.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), name
        assert names == {r.rsplit(",", 2)[0] for r in record}
    with zipfile.ZipFile(wheels["0.14"]) as zf:
        assert not any("qwen3_5" in n for n in zf.namelist())


def _fake_dist(site, name, version):
    d = site / f"{name}-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "INSTALLER").write_text("pip\n")
    (d / "RECORD").write_text(f"{d.name}/METADATA,,\n{d.name}/INSTALLER,,\n{d.name}/RECORD,,\n")


def test_pip_install_and_pip_check_conflict(wheels, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels["0.14"])],
                   check=True, timeout=120)
    version = subprocess.run([str(venv / "bin" / "vllm"), "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == "0.14.1"
    site = next((venv / "lib").glob("python3*/site-packages"))
    _fake_dist(site, "transformers", "5.0.0")
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 1
    assert "vllm 0.14.1 has requirement transformers<5,>=4.56.0, but you have transformers 5.0.0." \
        in check.stdout.splitlines()
    # the same environment with transformers 4.57.6 has no transformers conflict
    subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", "transformers"], check=True, timeout=120)
    _fake_dist(site, "transformers", "4.57.6")
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert not any(line.startswith("vllm 0.14.1 has requirement transformers") for line in check.stdout.splitlines())
    assert "vllm 0.14.1 requires ray, which is not installed." in check.stdout.splitlines()


@pytest.mark.parametrize("flavour,version", [("0.14", "2.27.5"), ("0.17", "2.28.9")])
def test_pip_nccl_wheel_carries_the_flavours_nccl_where_images_have_it(tmp_path, flavour, version):
    whl = build_wheel.build_nccl_wheel(flavour, tmp_path)
    assert whl.name == f"nvidia_nccl_cu13-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        assert {"nvidia/nccl/lib/libnccl.so.2", "nvidia/nccl/include/nccl.h"} <= names
        meta = zf.read(f"nvidia_nccl_cu13-{version}.dist-info/METADATA").decode().splitlines()
        assert "Name: nvidia-nccl-cu13" in meta and f"Version: {version}" in meta
        major, minor, patch = version.split(".")
        assert f"#define NCCL_MINOR {minor}" in zf.read("nvidia/nccl/include/nccl.h").decode()
        assert f"#define NCCL_MAJOR {major}\n" in zf.read("nvidia/nccl/include/nccl.h").decode()
        assert f"#define NCCL_PATCH {patch}\n" in zf.read("nvidia/nccl/include/nccl.h").decode()
