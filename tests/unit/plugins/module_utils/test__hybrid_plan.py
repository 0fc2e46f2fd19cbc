# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of module_utils/_hybrid_plan (the hybrid_image_plan action's logic): the role's input checks, Ray's
requirement and lock, and the content tag - the same tag the role's Jinja derived before the action (0.16.0), so that
an upgrade of the collection rebuilds no image."""

from __future__ import annotations

import hashlib

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.dgxspark.vllm.plugins.module_utils import _hybrid_plan

GIVEN = {
    "strategy": "overlay", "source": "lab/vllm-qwen35:0.17", "base": "vllm-node", "pull": False,
    "repository": "dgxspark/vllm-hybrid", "tag": "dgxspark/vllm-hybrid:latest",
    "graft_files": ["vllm/model_executor/models/qwen3_5.py"],
    "registry_entries": [{"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5",
                          "class_name": "Qwen3_5MoeForConditionalGeneration", "table": "_MULTIMODAL_MODELS"}],
    "config_entries": [{"class_name": "Qwen3_5Config", "module": "qwen3_5"}],
    "pip_install": ["transformers==4.57.1"], "pip_cert": "", "pip_wheelhouse": "", "ray_install": "auto",
    "ray_version": "2.54.1", "min_ray_version": "2.54.0", "ray_extras": ["default"], "ray_lock": "/x/ray.txt",
    "launcher": "", "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_dir": "",
    "accept_conflicts": [], "verify": True,
}
NO_RAY = {"id": "sha256:" + "a" * 64, "python": "/usr/bin/python3", "site_packages": ["/usr/lib/python3/dist-packages"],
          "ray_present": False, "versions": {"vllm": "0.17.0", "ray": None}}
LOCK = "ray[default]==2.54.1 \\\n    --hash=sha256:" + "b" * 64 + "\n"

# The role's own Jinja before hybrid_image_plan (roles/hybrid_image/tasks/main.yml at 0.16.0): its inputs and tag.
JINJA_INPUTS = {
    "strategy": "{{ hybrid_image_strategy }}",
    "recipe": "{{ recipe_text | hash('sha256') }}",
    "donor": "{{ hybrid_image_source_info.id }}",
    "base": "{{ hybrid_image_base_info.id if hybrid_image_strategy == 'graft' else '' }}",
    "files": "{{ hybrid_image_graft_files if hybrid_image_strategy == 'graft' else [] }}",
    "registry_entries": "{{ hybrid_image_registry_entries if hybrid_image_strategy == 'graft' else [] }}",
    "config_entries": "{{ hybrid_image_config_entries if hybrid_image_strategy == 'graft' else [] }}",
    "pip": "{{ ([hybrid_image_ray_spec] if hybrid_image_add_ray else []) + hybrid_image_pip_install }}",
    "pip_cert": "{{ hybrid_image_pip_cert | length > 0 }}",
    "ray_lock": "{{ (hybrid_image_ray_lock_text | hash('sha256')) if hybrid_image_add_ray else '' }}",
    "wheelhouse": "{{ (hybrid_image_wheelhouse_files.files | map(attribute='path') | map('basename') | sort)"
                  " if hybrid_image_pip_wheelhouse | length > 0 else [] }}",
    "launcher_sha256": "{{ hybrid_image_launcher_sha256 }}",
    "launcher_version": "{{ hybrid_image_launcher_version }}",
    "architectures": "{{ hybrid_image_gate_architectures }}",
    "accept_conflicts": "{{ hybrid_image_accept_conflicts }}",
    "min_ray_version": "{{ hybrid_image_min_ray_version }}",
    "verify": "{{ hybrid_image_verify | bool }}",
}
JINJA_ADD_RAY = ("{{ hybrid_image_ray_install == 'always' or (hybrid_image_ray_install == 'auto' and (not "
                 "hybrid_image_from_info.ray_present or (hybrid_image_from_info.versions.ray or '0') is "
                 "version(hybrid_image_min_ray_version, '<'))) }}")
JINJA_SPEC = ("ray{{ ('[' ~ (hybrid_image_ray_extras | join(',')) ~ ']') if hybrid_image_ray_extras | length > 0 "
              "else '' }}=={{ hybrid_image_ray_version }}")
JINJA_TAG = ("{{ hybrid_image_repository ~ ':' ~ hybrid_image_strategy ~ '-' ~ ('' if hybrid_image_verify | bool "
             "else 'unverified-') ~ (hybrid_image_inputs | to_json(sort_keys=True) | hash('sha256'))[:12] }}")


def jinja_tag(given, source, base, wheelhouse, launcher, recipe):
    """The tag the role's 0.16.0 Jinja derived from the same inputs, through Ansible's own templating."""
    variables = {f"hybrid_image_{k}": v for k, v in given.items()}
    from_info = base if given["strategy"] == "graft" else source
    variables.update(hybrid_image_source_info=source, hybrid_image_base_info=base, hybrid_image_from_info=from_info,
                     hybrid_image_gate_architectures=given["architectures"], recipe_text=recipe,
                     hybrid_image_ray_lock_text=LOCK, hybrid_image_launcher_version="0.9.0",
                     hybrid_image_launcher_sha256=hashlib.sha256(launcher.encode()).hexdigest(),
                     hybrid_image_wheelhouse_files={"files": [{"path": f"/w/{name}"} for name in wheelhouse]})
    templar = Templar(loader=DataLoader(), variables=variables)
    variables["hybrid_image_add_ray"] = templar.template(trust_as_template(JINJA_ADD_RAY))
    variables["hybrid_image_ray_spec"] = templar.template(trust_as_template(JINJA_SPEC))
    templar = Templar(loader=DataLoader(), variables=variables)
    variables["hybrid_image_inputs"] = {k: templar.template(trust_as_template(v)) for k, v in JINJA_INPUTS.items()}
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template(JINJA_TAG))


def plan_tag(given, source, base, wheelhouse, launcher, recipe):
    from_info = base if given["strategy"] == "graft" else source
    ray = _hybrid_plan.ray_plan(given, from_info, LOCK, given["ray_lock"])
    made_of = _hybrid_plan.inputs(given, recipe_sha256=hashlib.sha256(recipe.encode()).hexdigest(),
                                  source_id=source["id"], base_id=base.get("id", ""), ray=ray, wheelhouse=wheelhouse,
                                  launcher_sha256=hashlib.sha256(launcher.encode()).hexdigest(), launcher="0.9.0",
                                  architectures=given["architectures"])
    return _hybrid_plan.content_tag(given["repository"], given["strategy"], given["verify"], made_of)[1]


@pytest.mark.parametrize("change", [
    {}, {"strategy": "graft"}, {"verify": False}, {"pip_cert": "/etc/ca.pem"}, {"pip_wheelhouse": "/w"},
    {"ray_install": "never"}, {"ray_install": "always", "ray_extras": []}, {"accept_conflicts": ["numpy"]},
    {"pip_install": []},
])
def test_the_content_tag_is_the_one_the_roles_jinja_derived_so_an_upgrade_rebuilds_nothing(change):
    given = dict(GIVEN, **change)
    base = dict(NO_RAY, id="sha256:" + "c" * 64, ray_present=True, versions={"vllm": "0.14.0", "ray": "2.53.0"})
    args = (given, NO_RAY, base, ["numpy-2.1.0-cp312-none-any.whl", "a-1.0-py3-none-any.whl"], "LAUNCHER = 1\n",
            "FROM {{ hybrid_image_from }}\n")
    assert plan_tag(*args) == jinja_tag(*args)
    assert plan_tag(*args).startswith(f"dgxspark/vllm-hybrid:{given['strategy']}-"
                                      f"{'' if given['verify'] else 'unverified-'}")


@pytest.mark.parametrize(("have", "present", "install", "added"), [
    ("2.54.1", True, "auto", False), ("2.53.0", True, "auto", True), (None, False, "auto", True),
    ("2.54.1", True, "always", True), (None, False, "never", False),
    # loose, as the role's Jinja compared (Ansible's version test): a pre-release sorts after its release
    ("2.54.0rc1", True, "auto", False), ("2.9", True, "auto", True),
])
def test_ray_is_added_when_asked_or_missing_or_older_than_the_minimum(have, present, install, added):
    ray = _hybrid_plan.ray_plan(dict(GIVEN, ray_install=install), {"ray_present": present, "versions": {"ray": have}},
                                LOCK, "/x/ray.txt")
    assert ray["add"] is added
    assert ray["requirements"] == (["ray[default]==2.54.1"] if added else []) + ["transformers==4.57.1"]
    assert ray["problems"] == [] and ray["lock_text"] == (LOCK if added else "")


def test_a_lock_that_is_no_file_or_does_not_pin_ray_is_a_problem():
    assert _hybrid_plan.ray_plan(dict(GIVEN, ray_install="always"), NO_RAY, None, "/x/ray.txt")["problems"] == [
        "/x/ray.txt is not a file on the controller"]
    found = _hybrid_plan.ray_plan(dict(GIVEN, ray_install="always"), NO_RAY, "ray==2.53.0\n", "/x/ray.txt")["problems"]
    assert found and all("/x/ray.txt" in problem for problem in found)


@pytest.mark.parametrize(("change", "needle"), [
    ({"strategy": "copy"}, "hybrid_image_strategy is 'copy': set it to overlay or graft"),
    ({"source": ""}, "hybrid_image_source is empty"),
    ({"strategy": "graft", "base": ""}, "hybrid_image_base is empty: a graft needs"),
    ({"ray_install": "maybe"}, "hybrid_image_ray_install is 'maybe'"),
    ({"repository": "Dgx/Hybrid"}, "hybrid_image_repository is 'Dgx/Hybrid'"),
    ({"tag": "dgx:bad tag"}, "hybrid_image_tag is 'dgx:bad tag'"),
    ({"architectures": ["Qwen-3"]}, "hybrid_image_architectures is ['Qwen-3']"),
    ({"architectures": []}, "hybrid_image_architectures is []"),
    ({"model_dir": "models/qwen"}, "hybrid_image_model_dir is 'models/qwen': give an absolute path"),
    ({"strategy": "graft", "graft_files": ["vllm/../etc/passwd"]}, "hybrid_image_graft_files has ['vllm/../etc/passwd']"),
    ({"source": "lab/vllm:0.17\nRUN id"}, "hybrid_image_source is"),
    ({"base": "Lab/Base Image"}, "hybrid_image_base is"),
])
def test_each_bad_input_is_a_sentence_naming_the_host_the_variable_and_the_fix(change, needle):
    found = _hybrid_plan.input_problems("spark-1", dict(GIVEN, **change))
    assert len(found) == 1 and needle in found[0] and "spark-1" in found[0], found


def test_good_inputs_have_no_problem_and_the_launcher_declares_its_version():
    assert _hybrid_plan.input_problems("spark-1", GIVEN) == []
    assert _hybrid_plan.input_problems("spark-1", dict(GIVEN, strategy="graft")) == []
    assert _hybrid_plan.launcher_version('LAUNCHER_VERSION = "0.9.0"\n', "x") == "0.9.0"
    with pytest.raises(_hybrid_plan.PlanError, match="/tmp/launch has no LAUNCHER_VERSION line"):
        _hybrid_plan.launcher_version("print(1)\n", "/tmp/launch")
