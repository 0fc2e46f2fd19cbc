# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the registry_patch module, on copies of the fixture registries."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import registry_patch

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "vllm_registry")

QWEN35 = [
    {"architecture": "Qwen3_5ForConditionalGeneration", "module": "qwen3_5", "class_name": "Qwen3_5ForConditionalGeneration",
     "table": "_MULTIMODAL_MODELS"},
    {"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5", "class_name": "Qwen3_5MoeForConditionalGeneration",
     "table": "_MULTIMODAL_MODELS"},
]


def place(tmp_path, name: str, target: str = "registry.py") -> str:
    """Copy a fixture into tmp_path/vllm/ and return its path."""
    directory = tmp_path / "vllm"
    directory.mkdir(exist_ok=True)
    path = directory / target
    shutil.copyfile(os.path.join(FIXTURES, name), path)
    return str(path)


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def run_main(capsys, args: dict) -> dict:
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            registry_patch.main()
    return json.loads(capsys.readouterr().out)


def diff_signs(before: bytes, after: bytes) -> set:
    return {line[0] for line in difflib.unified_diff(before.decode().splitlines(True), after.decode().splitlines(True), n=0)
            if not line.startswith(("---", "+++", "@@"))}


def test_add_to_0_14_then_rerun_is_unchanged(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": QWEN35})
    assert result["changed"] is True
    assert "failed" not in result
    assert result["added"] == [dict(entry) for entry in QWEN35]
    assert (result["already_present"], result["removed"]) == ([], [])
    assert "backup_file" not in result and "diff" not in result
    after = read(path)
    assert diff_signs(before, after) == {"+"}
    assert len(after.decode().splitlines()) == len(before.decode().splitlines()) + 5
    compile(after, path, "exec")
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.py"]

    again = run_main(capsys, {"path": path, "entries": QWEN35})
    assert again["changed"] is False
    assert again["added"] == []
    assert [(p["architecture"], p["table"]) for p in again["already_present"]] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS"), ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS")]
    assert read(path) == after


def test_0_17_already_present_does_not_touch_the_file(capsys, tmp_path):
    path = place(tmp_path, "registry_0_17_shape.py.txt")
    before_stat = os.stat(path)
    result = run_main(capsys, {"path": path, "entries": [dict(e, table="_TEXT_GENERATION_MODELS") for e in QWEN35], "backup": True})
    assert result["changed"] is False
    assert [(p["architecture"], p["table"], p["tables"]) for p in result["already_present"]] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"]),
        ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"])]
    after_stat = os.stat(path)
    assert (after_stat.st_ino, after_stat.st_mtime_ns) == (before_stat.st_ino, before_stat.st_mtime_ns)
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.py"]


def test_conflict_fails_and_leaves_the_file_byte_identical(capsys, tmp_path):
    path = place(tmp_path, "registry_0_17_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": [dict(QWEN35[1], module="qwen3_5_moe")], "backup": True})
    assert result["failed"] is True
    assert result["changed"] is False
    assert result["msg"] == (
        path + ": Qwen3_5MoeForConditionalGeneration is already mapped to qwen3_5.Qwen3_5MoeForConditionalGeneration "
        "(_MULTIMODAL_MODELS line 79), not qwen3_5_moe.Qwen3_5MoeForConditionalGeneration; set force=true to replace it")
    assert read(path) == before
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.py"]


def test_force_replaces(capsys, tmp_path):
    path = place(tmp_path, "registry_0_17_shape.py.txt")
    result = run_main(capsys, {"path": path, "entries": [dict(QWEN35[1], module="qwen3_5_moe")], "force": True})
    assert result["changed"] is True
    assert result["removed"] == [{"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5",
                                  "class_name": "Qwen3_5MoeForConditionalGeneration", "table": "_MULTIMODAL_MODELS", "line": 79}]
    assert result["added"] == [dict(QWEN35[1], module="qwen3_5_moe")]
    assert '        "qwen3_5_moe",\n        "Qwen3_5MoeForConditionalGeneration",\n' in read(path).decode()


def test_absent_removes_the_lines(capsys, tmp_path):
    path = place(tmp_path, "registry_0_17_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "state": "absent", "entries": [{"architecture": e["architecture"]} for e in QWEN35]})
    assert result["changed"] is True
    assert [(r["architecture"], r["table"], r["line"]) for r in result["removed"]] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS", 75), ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS", 79)]
    after = read(path)
    assert diff_signs(before, after) == {"-"}
    assert len(after.decode().splitlines()) == len(before.decode().splitlines()) - 8
    again = run_main(capsys, {"path": path, "state": "absent", "entries": [{"architecture": e["architecture"]} for e in QWEN35]})
    assert (again["changed"], again["removed"]) == (False, [])


def test_backup(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": QWEN35, "backup": True})
    assert result["changed"] is True
    backup = result["backup_file"]
    assert os.path.dirname(backup) == os.path.dirname(path)
    assert os.path.basename(backup).startswith("registry.py.")
    assert read(backup) == before
    assert read(path) != before
    assert sorted(os.listdir(os.path.dirname(path))) == sorted(["registry.py", os.path.basename(backup)])


def test_check_mode_writes_nothing(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": QWEN35, "backup": True, "_ansible_check_mode": True})
    assert result["changed"] is True
    assert [a["architecture"] for a in result["added"]] == [e["architecture"] for e in QWEN35]
    assert "backup_file" not in result
    assert read(path) == before
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.py"]


def test_diff_mode_returns_before_and_after(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path).decode()
    result = run_main(capsys, {"path": path, "entries": QWEN35, "_ansible_diff": True, "_ansible_check_mode": True})
    diff = result["diff"]
    assert (diff["before_header"], diff["after_header"]) == (path, path)
    assert diff["before"] == before
    assert diff["after"] != before
    assert '    "Qwen3_5MoeForConditionalGeneration": (\n        "qwen3_5",\n' in diff["after"]
    assert read(path).decode() == before


@pytest.mark.parametrize("entry, message", [
    ({"architecture": "Qwen3.5MoeForConditionalGeneration", "module": "qwen3_5"},
     "entries[0]: architecture 'Qwen3.5MoeForConditionalGeneration' is not a valid Python identifier"),
    ({"architecture": "Qwen3_5Moe", "module": "qwen3.5"}, "entries[0]: module 'qwen3.5' is not a valid Python module name"),
    ({"architecture": "Qwen3_5Moe", "module": "qwen3_5", "table": "_NO_SUCH_MODELS"}, "table _NO_SUCH_MODELS not found in the registry"),
])
def test_invalid_input_fails_without_touching_the_file(capsys, tmp_path, entry, message):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": [entry]})
    assert result["failed"] is True
    assert result["msg"].startswith(path + ": " + message)
    assert read(path) == before


def test_non_registry_file_is_refused(capsys, tmp_path):
    path = place(tmp_path, "not_a_registry.py.txt")
    before = read(path)
    result = run_main(capsys, {"path": path, "entries": QWEN35})
    assert result["failed"] is True
    assert result["msg"].startswith(path + ": this is not a vLLM registry")
    assert read(path) == before


def test_table_built_by_a_call_is_refused(capsys, tmp_path):
    path = place(tmp_path, "registry_built_by_call.py.txt")
    result = run_main(capsys, {"path": path, "entries": [dict(QWEN35[0], table="_TEXT_GENERATION_MODELS")]})
    assert result["failed"] is True
    assert result["msg"] == (path + ": cannot safely edit _TEXT_GENERATION_MODELS: _TEXT_GENERATION_MODELS is built by a function call "
                             "(line 9), not a dict literal; patch this file by hand")


def test_missing_file_and_directory(capsys, tmp_path):
    result = run_main(capsys, {"path": str(tmp_path / "nope.py"), "entries": QWEN35})
    assert (result["failed"], result["msg"]) == (True, "%s: %s does not exist" % (tmp_path / "nope.py", tmp_path / "nope.py"))
    result = run_main(capsys, {"path": str(tmp_path), "entries": QWEN35})
    assert result["msg"] == "%s: %s is not a regular file" % (tmp_path, tmp_path)


def test_mode_is_preserved_and_symlink_followed(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    os.chmod(path, 0o640)
    link = str(tmp_path / "link.py")
    os.symlink(path, link)
    owner = (os.stat(path).st_uid, os.stat(path).st_gid)
    result = run_main(capsys, {"path": link, "entries": QWEN35})
    assert result["changed"] is True
    assert os.path.islink(link)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == owner
    assert "Qwen3_5MoeForConditionalGeneration" in read(path).decode()


def test_byte_order_mark_is_kept(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(b"\xef\xbb\xbf" + data)
    result = run_main(capsys, {"path": path, "entries": QWEN35})
    assert result["changed"] is True
    after = read(path)
    assert after.startswith(b"\xef\xbb\xbf" + data[:40])
    assert diff_signs(b"\xef\xbb\xbf" + data, after) == {"+"}


def test_not_utf8_is_refused(capsys, tmp_path):
    path = str(tmp_path / "registry.py")
    with open(path, "wb") as handle:
        handle.write(b"_TEXT_GENERATION_MODELS = {}  # \xff\n")
    result = run_main(capsys, {"path": path, "entries": QWEN35})
    assert result["failed"] is True
    assert result["msg"].startswith("%s: %s is not UTF-8 text" % (path, path))


def test_configs_kind_adds_and_is_idempotent(capsys, tmp_path):
    path = place(tmp_path, "configs_init_0_14_shape.py.txt", "__init__.py")
    before = read(path)
    entries = [{"class_name": "Qwen3_5Config", "module": "qwen3_5"}, {"class_name": "Qwen3_5MoeConfig", "module": "qwen3_5_moe"}]
    result = run_main(capsys, {"path": path, "kind": "configs", "entries": entries})
    assert result["changed"] is True
    assert result["added"] == [
        {"class_name": "Qwen3_5Config", "module": "vllm.transformers_utils.configs.qwen3_5", "changes": ["_CLASS_TO_MODULE", "__all__"]},
        {"class_name": "Qwen3_5MoeConfig", "module": "vllm.transformers_utils.configs.qwen3_5_moe", "changes": ["_CLASS_TO_MODULE", "__all__"]}]
    after = read(path)
    assert diff_signs(before, after) == {"+"}
    again = run_main(capsys, {"path": path, "kind": "configs", "entries": entries})
    assert (again["changed"], len(again["already_present"])) == (False, 2)


def test_configs_kind_on_a_registry_and_registry_options_are_refused(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    result = run_main(capsys, {"path": path, "kind": "configs", "entries": [{"class_name": "Qwen3_5Config", "module": "qwen3_5"}]})
    assert result["failed"] is True
    assert result["msg"].startswith(path + ": this is not vLLM's transformers_utils/configs/__init__.py")
    conf = place(tmp_path, "configs_init_0_14_shape.py.txt", "__init__.py")
    result = run_main(capsys, {"path": conf, "kind": "configs", "entries": [dict(QWEN35[0])]})
    assert result["msg"] == conf + ": entries[0]: architecture is not used with kind=configs; give class_name and module"


def test_empty_entries_change_nothing(capsys, tmp_path):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    result = run_main(capsys, {"path": path, "entries": []})
    assert (result["changed"], result["added"], result["already_present"], result["removed"]) == (False, [], [], [])


def test_write_failure_is_reported(capsys, tmp_path, monkeypatch):
    path = place(tmp_path, "registry_0_14_shape.py.txt")
    before = read(path)

    def refuse(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(registry_patch.os, "fsync", refuse)
    result = run_main(capsys, {"path": path, "entries": QWEN35})
    assert result["failed"] is True
    assert result["msg"] == path + ": cannot write the file: [Errno 28] No space left on device"
    assert read(path) == before
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.py"]
