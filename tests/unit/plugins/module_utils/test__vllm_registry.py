# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the static vLLM registry parser and editor, over fixture files in the real shapes."""

from __future__ import annotations

import difflib
import os
import re

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _vllm_registry as reg

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "vllm_registry")

QWEN35 = [
    {"architecture": "Qwen3_5ForConditionalGeneration", "module": "qwen3_5", "class_name": "Qwen3_5ForConditionalGeneration",
     "table": "_MULTIMODAL_MODELS"},
    {"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5", "class_name": "Qwen3_5MoeForConditionalGeneration",
     "table": "_MULTIMODAL_MODELS"},
]
QWEN35_CONFIGS = [
    {"class_name": "Qwen3_5Config", "module": "qwen3_5"},
    {"class_name": "Qwen3_5MoeConfig", "module": "qwen3_5_moe"},
]


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def changed_lines(before: str, after: str) -> list:
    """The +/- lines of a unified diff (headers and hunk markers left out)."""
    return [line.rstrip("\n") for line in difflib.unified_diff(before.splitlines(True), after.splitlines(True), n=0)
            if not line.startswith(("---", "+++", "@@"))]


# ----------------------------------------------------------------------------- identifiers


@pytest.mark.parametrize("name, expected", [
    ("Qwen3_5MoeForConditionalGeneration", True), ("_x", True), ("Ärchitecture", True),
    ("Qwen3.5", False), ("3Qwen", False), ("class", False), ("a-b", False), ("", False), (None, False), (5, False),
])
def test_is_identifier(name, expected):
    assert reg.is_identifier(name) is expected


@pytest.mark.parametrize("name, expected", [
    ("qwen3_5", True), ("vllm.models.step5", True), ("speculators.base", True),
    ("qwen3.5", False), ("qwen-3", False), ("a..b", False), (".a", False), ("a.", False), ("", False), ("import.x", False),
])
def test_is_module_path(name, expected):
    assert reg.is_module_path(name) is expected


@pytest.mark.parametrize("module, expected", [
    ("qwen3_5_moe", "vllm.transformers_utils.configs.qwen3_5_moe"),
    ("speculators.base", "vllm.transformers_utils.configs.speculators.base"),
    ("vllm.models.flint.configs", "vllm.models.flint.configs"),
    ("transformers", "transformers"),
    ("transformers_x", "vllm.transformers_utils.configs.transformers_x"),
])
def test_resolve_config_module(module, expected):
    assert reg.resolve_config_module(module) == expected


# ----------------------------------------------------------------------------- parsing


def test_parse_0_10_shape_tables_entries_and_spreads():
    registry = reg.parse_registry(fixture("registry_0_10_shape.py.txt"))
    assert sorted(registry.model_tables) == [
        "_CROSS_ENCODER_MODELS", "_EMBEDDING_MODELS", "_MULTIMODAL_MODELS", "_SPECULATIVE_DECODING_MODELS",
        "_TEXT_GENERATION_MODELS", "_TRANSFORMERS_MODELS", "_VLLM_MODELS"]
    # string-valued dicts are tables but not model tables
    assert registry.tables["_PREVIOUSLY_SUPPORTED_MODELS"].is_model_table is False
    text_gen = registry.tables["_TEXT_GENERATION_MODELS"]
    assert len(text_gen.entries) == 13
    assert text_gen.evaluate()["Qwen3MoeForCausalLM"] == ("qwen3_moe", "Qwen3MoeForCausalLM")
    assert (text_gen.line, text_gen.end_line) == (12, 28)
    cross = {entry.architecture: entry for entry in registry.tables["_CROSS_ENCODER_MODELS"].entries}
    roberta = cross["RobertaForSequenceClassification"]
    assert (roberta.module, roberta.class_name, roberta.line, roberta.end_line) == ("roberta", "RobertaForSequenceClassification", 46, 47)
    embedding = registry.tables["_EMBEDDING_MODELS"]
    assert [(spread.kind, spread.source, spread.line, spread.end_line) for spread in embedding.spreads] == [
        ("expression", "{comprehension over _TEXT_GENERATION_MODELS.items()}", 34, 38)]
    assert embedding.editable is True
    assert [spread.source for spread in registry.tables["_VLLM_MODELS"].spreads] == [
        "_TEXT_GENERATION_MODELS", "_EMBEDDING_MODELS", "_CROSS_ENCODER_MODELS", "_MULTIMODAL_MODELS",
        "_SPECULATIVE_DECODING_MODELS", "_TRANSFORMERS_MODELS"]
    assert registry.architectures()["Qwen2VLForConditionalGeneration"] == ["_EMBEDDING_MODELS", "_MULTIMODAL_MODELS"]


def test_parse_edge_shape_annotated_literal_spread_and_long_tuples():
    registry = reg.parse_registry(fixture("registry_edge_shape.py.txt"))
    text_gen = registry.tables["_TEXT_GENERATION_MODELS"]
    assert [(e.architecture, e.line, e.end_line, e.in_spread) for e in text_gen.entries] == [
        ("LlamaForCausalLM", 8, 8, False), ("MistralForCausalLM", 11, 11, True),
        ("Qwen2ForCausalLM", 12, 15, True), ("Qwen3ForCausalLM", 17, 17, False)]
    assert [(s.kind, s.line, s.end_line) for s in text_gen.spreads] == [("literal", 9, 16)]
    assert registry.tables["_VERSIONED_MODELS"].entries[0].extra == ("v1",)
    assert registry.tables["_SPECULATIVE_DECODING_MODELS"].entries == []
    assert registry.tables["_SPECULATIVE_DECODING_MODELS"].is_model_table is True
    assert [e.architecture for e in registry.tables["_EMBEDDING_MODELS"].entries] == ["BertModel", "Ärchitecture", "GteModel"]


def test_describe_registry_is_json_friendly():
    summary = reg.describe_registry(fixture("registry_0_17_shape.py.txt"))
    assert summary["tables"]["_SPECULATIVE_DECODING_MODELS"]["entries"]["Qwen3_5MoeMTP"] == ["qwen3_5_mtp", "Qwen3_5MoeMTP"]
    assert summary["architectures"]["Qwen3_5MoeForConditionalGeneration"] == ["_MULTIMODAL_MODELS"]
    assert "_PREVIOUSLY_SUPPORTED_MODELS" not in summary["tables"]
    assert summary["unsupported"] == {}


def test_parse_reports_tables_built_by_calls_and_mutations():
    registry = reg.parse_registry(fixture("registry_built_by_call.py.txt"))
    assert registry.unsupported == {
        "_TEXT_GENERATION_MODELS": "_TEXT_GENERATION_MODELS is built by a function call (line 9), not a dict literal"}
    assert registry.tables["_MULTIMODAL_MODELS"].problems == ["_MULTIMODAL_MODELS is changed after its definition (line 16)"]
    assert registry.tables["_EMBEDDING_MODELS"].editable is True


# ----------------------------------------------------------------------------- adding


def test_add_qwen35_to_0_14_shape_only_adds_lines_in_the_file_style():
    before = fixture("registry_0_14_shape.py.txt")
    result = reg.patch_registry(before, QWEN35)
    assert result.changed is True
    assert changed_lines(before, result.after) == [
        '+    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5ForConditionalGeneration"),',
        '+    "Qwen3_5MoeForConditionalGeneration": (',
        '+        "qwen3_5",',
        '+        "Qwen3_5MoeForConditionalGeneration",',
        '+    ),',
    ]
    # the new lines follow the table's last entry
    lines = result.after.splitlines()
    index = lines.index('    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5ForConditionalGeneration"),')
    assert lines[index - 1].startswith('    "WhisperForConditionalGeneration": ')
    assert lines[index + 5] == "}"
    compile(result.after, "registry.py", "exec")
    assert [(a["architecture"], a["table"]) for a in result.added] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS"), ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS")]
    assert result.already_present == [] and result.removed == []
    table = reg.parse_registry(result.after).tables["_MULTIMODAL_MODELS"].evaluate()
    assert table["Qwen3_5MoeForConditionalGeneration"] == ("qwen3_5", "Qwen3_5MoeForConditionalGeneration")

    again = reg.patch_registry(result.after, QWEN35)
    assert again.changed is False
    assert again.after == result.after
    assert again.added == []
    assert [(p["architecture"], p["table"], p["tables"]) for p in again.already_present] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"]),
        ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"])]


def test_0_17_shape_already_present():
    before = fixture("registry_0_17_shape.py.txt")
    result = reg.patch_registry(before, QWEN35)
    assert result.changed is False
    assert result.after == before
    assert result.added == []
    assert [p["architecture"] for p in result.already_present] == [e["architecture"] for e in QWEN35]


def test_present_in_another_table_counts_as_present_and_names_the_table():
    before = fixture("registry_0_17_shape.py.txt")
    entries = [dict(entry, table="_TEXT_GENERATION_MODELS") for entry in QWEN35]
    result = reg.patch_registry(before, entries)
    assert result.changed is False
    assert [(p["table"], p["tables"]) for p in result.already_present] == [
        ("_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"]), ("_MULTIMODAL_MODELS", ["_MULTIMODAL_MODELS"])]


def test_default_table_and_class_name_default():
    before = fixture("registry_0_14_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": "Qwen3_5ForCausalLM", "module": "qwen3_5"}])
    assert result.added == [{"architecture": "Qwen3_5ForCausalLM", "module": "qwen3_5", "class_name": "Qwen3_5ForCausalLM",
                             "table": "_TEXT_GENERATION_MODELS"}]
    assert changed_lines(before, result.after) == ['+    "Qwen3_5ForCausalLM": ("qwen3_5", "Qwen3_5ForCausalLM"),']
    assert result.after.index('"Qwen3_5ForCausalLM"') > result.after.index('"SeedOssForCausalLM"')
    assert result.after.index('"Qwen3_5ForCausalLM"') < result.after.index("_EMBEDDING_MODELS = {")


def test_add_to_0_10_shape_uses_noqa_for_long_lines():
    before = fixture("registry_0_10_shape.py.txt")
    result = reg.patch_registry(before, [QWEN35[1], {"architecture": "Qwen3_5MTP", "module": "qwen3_5_mtp",
                                                     "table": "_SPECULATIVE_DECODING_MODELS"}])
    assert changed_lines(before, result.after) == [
        '+    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5", "Qwen3_5MoeForConditionalGeneration"),  # noqa: E501',
        '+    "Qwen3_5MTP": ("qwen3_5_mtp", "Qwen3_5MTP"),',
    ]
    # the MTP entry goes after the last entry, before the commented-out one
    assert '"MedusaModel": ("medusa", "Medusa"),\n    "Qwen3_5MTP": ("qwen3_5_mtp", "Qwen3_5MTP"),\n    # Switched off' in result.after


def test_add_dotted_module_to_0_33_shape():
    before = fixture("registry_0_33_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": "Step6ForCausalLM", "module": "vllm.models.step6"}])
    assert changed_lines(before, result.after) == ['+    "Step6ForCausalLM": ("vllm.models.step6", "Step6ForCausalLM"),']


@pytest.mark.parametrize("table, expected", [
    # single quotes, no trailing comma on the last entry: it gets one, the new entry has none
    ("_TEXT_GENERATION_MODELS", ["-    'Qwen3ForCausalLM': ('qwen3', 'Qwen3ForCausalLM')",
                                 "+    'Qwen3ForCausalLM': ('qwen3', 'Qwen3ForCausalLM'),",
                                 "+    'NewArch': ('new_mod', 'NewArch')"]),
    # a one-line dict stays one line
    ("_MULTIMODAL_MODELS", ["-_MULTIMODAL_MODELS = {'LlavaForConditionalGeneration': ('llava', 'LlavaForConditionalGeneration')}",
                            "+_MULTIMODAL_MODELS = {'LlavaForConditionalGeneration': ('llava', 'LlavaForConditionalGeneration'), "
                            "'NewArch': ('new_mod', 'NewArch')}"]),
    # an empty dict opens up
    ("_SPECULATIVE_DECODING_MODELS", ["-_SPECULATIVE_DECODING_MODELS = {}", "+_SPECULATIVE_DECODING_MODELS = {",
                                      "+    'NewArch': ('new_mod', 'NewArch'),", "+}"]),
    # after a line holding two entries, with the indentation of that line
    ("_EMBEDDING_MODELS", ["+    'NewArch': ('new_mod', 'NewArch'),"]),
])
def test_add_to_edge_shapes(table, expected):
    before = fixture("registry_edge_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": "NewArch", "module": "new_mod", "table": table}])
    assert changed_lines(before, result.after) == expected
    assert reg.parse_registry(result.after).tables[table].evaluate()["NewArch"] == ("new_mod", "NewArch")


def test_crlf_line_endings_are_kept():
    before = fixture("registry_0_14_shape.py.txt").replace("\n", "\r\n")
    result = reg.patch_registry(before, QWEN35)
    assert result.after.count("\r\n") == result.after.count("\n")
    assert '    "Qwen3_5MoeForConditionalGeneration": (\r\n        "qwen3_5",\r\n' in result.after


# ----------------------------------------------------------------------------- conflicts and force


def test_conflict_is_refused_naming_the_mapping():
    before = fixture("registry_0_17_shape.py.txt")
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_registry(before, [dict(QWEN35[1], module="qwen3_5_moe")])
    assert str(err.value) == (
        "Qwen3_5MoeForConditionalGeneration is already mapped to qwen3_5.Qwen3_5MoeForConditionalGeneration "
        "(_MULTIMODAL_MODELS line 79), not qwen3_5_moe.Qwen3_5MoeForConditionalGeneration; set force=true to replace it")


def test_force_replaces_in_place_in_the_requested_table():
    before = fixture("registry_0_17_shape.py.txt")
    result = reg.patch_registry(before, [dict(QWEN35[1], module="qwen3_5_moe")], force=True)
    # the entry is rewritten in place; only its module line differs
    assert changed_lines(before, result.after) == ['-        "qwen3_5",', '+        "qwen3_5_moe",']
    assert result.removed == [{"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5",
                               "class_name": "Qwen3_5MoeForConditionalGeneration", "table": "_MULTIMODAL_MODELS", "line": 79}]
    assert result.added == [{"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5_moe",
                             "class_name": "Qwen3_5MoeForConditionalGeneration", "table": "_MULTIMODAL_MODELS"}]
    assert reg.patch_registry(result.after, [dict(QWEN35[1], module="qwen3_5_moe")]).changed is False


def test_force_moves_an_entry_out_of_another_table():
    before = fixture("registry_0_14_shape.py.txt")
    entry = {"architecture": "Qwen3NextForCausalLM", "module": "qwen3_next_v2", "table": "_MULTIMODAL_MODELS"}
    result = reg.patch_registry(before, [entry], force=True)
    assert changed_lines(before, result.after) == [
        '-    "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextForCausalLM"),',
        '+    "Qwen3NextForCausalLM": ("qwen3_next_v2", "Qwen3NextForCausalLM"),',
    ]
    tables = reg.parse_registry(result.after).architectures()
    assert tables["Qwen3NextForCausalLM"] == ["_MULTIMODAL_MODELS"]


def test_force_with_the_same_mapping_elsewhere_only_removes_the_conflict():
    before = fixture("registry_0_10_shape.py.txt")
    # Qwen2VLForConditionalGeneration is in _EMBEDDING_MODELS and _MULTIMODAL_MODELS; make one of them differ
    text = before.replace('    "Qwen2VLForConditionalGeneration": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),  # noqa: E501\n}',
                          '    "Qwen2VLForConditionalGeneration": ("qwen2_vl_old", "Qwen2VLForConditionalGeneration"),  # noqa: E501\n}')
    assert text != before
    entry = {"architecture": "Qwen2VLForConditionalGeneration", "module": "qwen2_vl", "table": "_MULTIMODAL_MODELS"}
    with pytest.raises(reg.RegistryError, match=re.escape("qwen2_vl_old.Qwen2VLForConditionalGeneration (_EMBEDDING_MODELS line 41)")):
        reg.patch_registry(text, [entry])
    result = reg.patch_registry(text, [entry], force=True)
    assert changed_lines(text, result.after) == [
        '-    "Qwen2VLForConditionalGeneration": ("qwen2_vl_old", "Qwen2VLForConditionalGeneration"),  # noqa: E501']
    assert result.added == []
    assert [r["table"] for r in result.removed] == ["_EMBEDDING_MODELS"]


# ----------------------------------------------------------------------------- removing


def test_absent_removes_whole_lines_of_multi_line_entries():
    before = fixture("registry_0_17_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": e["architecture"]} for e in QWEN35], state="absent")
    assert changed_lines(before, result.after) == [
        '-    "Qwen3_5ForConditionalGeneration": (',
        '-        "qwen3_5",',
        '-        "Qwen3_5ForConditionalGeneration",',
        '-    ),',
        '-    "Qwen3_5MoeForConditionalGeneration": (',
        '-        "qwen3_5",',
        '-        "Qwen3_5MoeForConditionalGeneration",',
        '-    ),',
    ]
    assert [(r["architecture"], r["table"], r["line"]) for r in result.removed] == [
        ("Qwen3_5ForConditionalGeneration", "_MULTIMODAL_MODELS", 75),
        ("Qwen3_5MoeForConditionalGeneration", "_MULTIMODAL_MODELS", 79)]
    # removing what the 0.14 patch added gives the 0.14 table back byte for byte
    added = reg.patch_registry(fixture("registry_0_14_shape.py.txt"), QWEN35).after
    assert reg.patch_registry(added, [{"architecture": e["architecture"]} for e in QWEN35], state="absent").after == \
        fixture("registry_0_14_shape.py.txt")
    assert reg.patch_registry(result.after, [{"architecture": e["architecture"]} for e in QWEN35], state="absent").changed is False


def test_absent_yapf_continuation_and_every_table():
    before = fixture("registry_0_10_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": "RobertaForSequenceClassification"},
                                         {"architecture": "Qwen2VLForConditionalGeneration"}], state="absent")
    assert changed_lines(before, result.after) == [
        '-    "Qwen2VLForConditionalGeneration": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),  # noqa: E501',
        '-    "RobertaForSequenceClassification": ("roberta",',
        '-                                         "RobertaForSequenceClassification"),',
        '-    "Qwen2VLForConditionalGeneration": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),  # noqa: E501',
    ]
    assert [r["table"] for r in result.removed] == ["_CROSS_ENCODER_MODELS", "_EMBEDDING_MODELS", "_MULTIMODAL_MODELS"]


def test_absent_limited_to_a_table_and_to_a_mapping():
    before = fixture("registry_0_10_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": "Qwen2VLForConditionalGeneration", "table": "_EMBEDDING_MODELS"}],
                                state="absent")
    assert [r["table"] for r in result.removed] == ["_EMBEDDING_MODELS"]
    with pytest.raises(reg.RegistryError, match="set force=true to remove it anyway"):
        reg.patch_registry(before, [{"architecture": "LlamaForCausalLM", "module": "llama2"}], state="absent")
    forced = reg.patch_registry(before, [{"architecture": "LlamaForCausalLM", "module": "llama2"}], state="absent", force=True)
    assert changed_lines(before, forced.after) == ['-    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),']


@pytest.mark.parametrize("arch, expected", [
    ("MistralForCausalLM", ["-        'MistralForCausalLM': ('llama', 'LlamaForCausalLM'),"]),  # inside a **{...} literal
    ("Qwen3ForCausalLM", ["-    'Qwen3ForCausalLM': ('qwen3', 'Qwen3ForCausalLM')"]),  # last entry, no trailing comma
    ("Ärchitecture", ["-    'Ärchitecture': ('mödule', 'Klässe'), 'GteModel': ('bert_with_rope', 'GteModel'),",
                      "+    'GteModel': ('bert_with_rope', 'GteModel'),"]),  # shares its line, non-ASCII columns
    ("GteModel", ["-    'Ärchitecture': ('mödule', 'Klässe'), 'GteModel': ('bert_with_rope', 'GteModel'),",
                  "+    'Ärchitecture': ('mödule', 'Klässe'),"]),
    ("LlavaForConditionalGeneration", [
        "-_MULTIMODAL_MODELS = {'LlavaForConditionalGeneration': ('llava', 'LlavaForConditionalGeneration')}",
        "+_MULTIMODAL_MODELS = {}"]),
])
def test_absent_edge_shapes(arch, expected):
    before = fixture("registry_edge_shape.py.txt")
    result = reg.patch_registry(before, [{"architecture": arch}], state="absent")
    assert changed_lines(before, result.after) == expected
    assert arch not in reg.parse_registry(result.after).architectures()


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("entry, message", [
    ({"architecture": "Qwen3.5", "module": "qwen3_5"}, "entries[0]: architecture 'Qwen3.5' is not a valid Python identifier"),
    ({"architecture": "Qwen35", "module": "qwen-3"}, "entries[0]: module 'qwen-3' is not a valid Python module name"),
    ({"architecture": "Qwen35", "module": "qwen3_5", "class_name": "1Bad"}, "entries[0]: class_name '1Bad' is not a valid Python identifier"),
    ({"architecture": "Qwen35", "module": "qwen3_5", "table": "_X-Y"}, "entries[0]: table '_X-Y' is not a valid Python identifier"),
    ({"architecture": "class", "module": "qwen3_5"}, "entries[0]: architecture 'class' is not a valid Python identifier"),
    ({"architecture": "Qwen35"}, "entries[0]: module is required with state=present"),
    ({"module": "qwen3_5"}, "entries[0]: architecture is required"),
])
def test_invalid_entries_are_refused(entry, message):
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_registry(fixture("registry_0_14_shape.py.txt"), [entry])
    assert str(err.value).startswith(message)


def test_duplicate_entries_with_different_settings_are_refused():
    with pytest.raises(reg.RegistryError, match="listed twice"):
        reg.patch_registry(fixture("registry_0_14_shape.py.txt"), [QWEN35[0], dict(QWEN35[0], module="other")])
    # the same entry twice is added once
    result = reg.patch_registry(fixture("registry_0_14_shape.py.txt"), [QWEN35[0], QWEN35[0]])
    assert len(result.added) == 1


def test_not_a_registry_is_refused():
    with pytest.raises(reg.RegistryError, match="^this is not a vLLM registry"):
        reg.patch_registry(fixture("not_a_registry.py.txt"), [QWEN35[0]])
    with pytest.raises(reg.RegistryError, match="^this is not a vLLM registry"):
        reg.patch_registry(fixture("configs_init_0_14_shape.py.txt"), [QWEN35[0]])
    with pytest.raises(reg.RegistryError, match="is not valid Python"):
        reg.patch_registry("_TEXT_GENERATION_MODELS = {\n", [QWEN35[0]])


def test_missing_table_lists_the_tables():
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_registry(fixture("registry_0_10_shape.py.txt"), [dict(QWEN35[0], table="_TRANSFORMERS_SUPPORTED_MODELS")])
    assert str(err.value) == (
        "table _TRANSFORMERS_SUPPORTED_MODELS not found in the registry (model tables in this file: _CROSS_ENCODER_MODELS, "
        "_EMBEDDING_MODELS, _MULTIMODAL_MODELS, _SPECULATIVE_DECODING_MODELS, _TEXT_GENERATION_MODELS, _TRANSFORMERS_MODELS, "
        "_VLLM_MODELS); set entries[].table to one of them")


@pytest.mark.parametrize("table, message", [
    ("_TEXT_GENERATION_MODELS", "cannot safely edit _TEXT_GENERATION_MODELS: _TEXT_GENERATION_MODELS is built by a function call (line 9)"),
    ("_MULTIMODAL_MODELS", "cannot safely edit _MULTIMODAL_MODELS: _MULTIMODAL_MODELS is changed after its definition (line 16)"),
])
def test_tables_that_cannot_be_edited_safely(table, message):
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_registry(fixture("registry_built_by_call.py.txt"), [dict(QWEN35[0], table=table)])
    assert str(err.value).startswith(message)


def test_table_assigned_twice_is_refused():
    text = fixture("registry_0_14_shape.py.txt") + '\n_MULTIMODAL_MODELS = {"A": ("a", "A")}\n'
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_registry(text, [QWEN35[0]])
    assert str(err.value) == ("cannot safely edit _MULTIMODAL_MODELS: _MULTIMODAL_MODELS is assigned more than once at module level "
                              "(lines 58, 140); patch this file by hand")


def test_string_table_and_three_element_tuples_are_refused():
    with pytest.raises(reg.RegistryError, match=r"_PREVIOUSLY_SUPPORTED_MODELS \(line 90\) is not a model table"):
        reg.patch_registry(fixture("registry_0_10_shape.py.txt"), [dict(QWEN35[0], table="_PREVIOUSLY_SUPPORTED_MODELS")])
    with pytest.raises(reg.RegistryError, match="entries of _VERSIONED_MODELS have more than two elements"):
        reg.patch_registry(fixture("registry_edge_shape.py.txt"), [dict(QWEN35[0], table="_VERSIONED_MODELS")])


def test_lone_carriage_return_is_refused():
    with pytest.raises(reg.RegistryError, match="carriage returns"):
        reg.parse_registry("_TEXT_GENERATION_MODELS = {}\r_X = 1\n")


# ----------------------------------------------------------------------------- configs/__init__.py


def test_configs_import_style_add():
    before = fixture("configs_init_0_11_shape.py.txt")
    result = reg.patch_configs(before, QWEN35_CONFIGS)
    assert changed_lines(before, result.after) == [
        "+from vllm.transformers_utils.configs.qwen3_5 import Qwen3_5Config",
        "+from vllm.transformers_utils.configs.qwen3_5_moe import Qwen3_5MoeConfig",
        '+    "Qwen3_5Config",',
        '+    "Qwen3_5MoeConfig",',
    ]
    assert "UltravoxConfig\nfrom vllm.transformers_utils.configs.qwen3_5 import" in result.after
    assert result.added == [
        {"class_name": "Qwen3_5Config", "module": "vllm.transformers_utils.configs.qwen3_5", "changes": ["import", "__all__"]},
        {"class_name": "Qwen3_5MoeConfig", "module": "vllm.transformers_utils.configs.qwen3_5_moe", "changes": ["import", "__all__"]}]
    compile(result.after, "__init__.py", "exec")
    again = reg.patch_configs(result.after, QWEN35_CONFIGS)
    assert again.changed is False
    assert [p["class_name"] for p in again.already_present] == ["Qwen3_5Config", "Qwen3_5MoeConfig"]


def test_configs_lazy_style_add_and_already_present():
    before = fixture("configs_init_0_14_shape.py.txt")
    result = reg.patch_configs(before, QWEN35_CONFIGS)
    assert changed_lines(before, result.after) == [
        '+    "Qwen3_5Config": "vllm.transformers_utils.configs.qwen3_5",',
        '+    "Qwen3_5MoeConfig": "vllm.transformers_utils.configs.qwen3_5_moe",',
        '+    "Qwen3_5Config",',
        '+    "Qwen3_5MoeConfig",',
    ]
    assert [a["changes"] for a in result.added] == [["_CLASS_TO_MODULE", "__all__"]] * 2
    assert reg.describe_configs(result.after)["classes"]["Qwen3_5MoeConfig"] == "vllm.transformers_utils.configs.qwen3_5_moe"
    present = reg.patch_configs(fixture("configs_init_0_17_shape.py.txt"), QWEN35_CONFIGS)
    assert present.changed is False
    assert present.already_present == [
        {"class_name": "Qwen3_5Config", "module": "vllm.transformers_utils.configs.qwen3_5"},
        {"class_name": "Qwen3_5MoeConfig", "module": "vllm.transformers_utils.configs.qwen3_5_moe"}]


def test_configs_missing_from_all_only_adds_the_name():
    before = fixture("configs_init_0_17_shape.py.txt").replace('    "Qwen3_5MoeConfig",\n', "")
    result = reg.patch_configs(before, QWEN35_CONFIGS)
    assert changed_lines(before, result.after) == ['+    "Qwen3_5MoeConfig",']
    assert result.added == [{"class_name": "Qwen3_5MoeConfig", "module": "vllm.transformers_utils.configs.qwen3_5_moe", "changes": ["__all__"]}]


def test_configs_absent_both_styles():
    lazy = fixture("configs_init_0_17_shape.py.txt")
    result = reg.patch_configs(lazy, [{"class_name": "Qwen3_5MoeConfig"}], state="absent")
    assert changed_lines(lazy, result.after) == [
        '-    "Qwen3_5MoeConfig": "vllm.transformers_utils.configs.qwen3_5_moe",', '-    "Qwen3_5MoeConfig",']
    assert result.removed == [{"class_name": "Qwen3_5MoeConfig", "module": "vllm.transformers_utils.configs.qwen3_5_moe",
                               "changes": ["_CLASS_TO_MODULE", "__all__"]}]
    imports = fixture("configs_init_0_11_shape.py.txt")
    result = reg.patch_configs(imports, [{"class_name": "RWConfig", "module": "falcon"}], state="absent")
    assert changed_lines(imports, result.after) == ["-from vllm.transformers_utils.configs.falcon import RWConfig", '-    "RWConfig",']
    with pytest.raises(reg.RegistryError, match="line 15 imports Step3VLConfig together with other names; remove it by hand"):
        reg.patch_configs(imports, [{"class_name": "Step3VLConfig"}], state="absent")
    assert reg.patch_configs(imports, [{"class_name": "NotThereConfig"}], state="absent").changed is False


def test_configs_conflict_and_force():
    imports = fixture("configs_init_0_11_shape.py.txt")
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_configs(imports, [{"class_name": "RWConfig", "module": "falcon_rw"}])
    assert str(err.value) == ("RWConfig is imported from vllm.transformers_utils.configs.falcon (line 12), "
                              "not vllm.transformers_utils.configs.falcon_rw; set force=true to replace it")
    result = reg.patch_configs(imports, [{"class_name": "RWConfig", "module": "falcon_rw"}], force=True)
    assert changed_lines(imports, result.after) == ["-from vllm.transformers_utils.configs.falcon import RWConfig",
                                                    "+from vllm.transformers_utils.configs.falcon_rw import RWConfig"]
    lazy = fixture("configs_init_0_33_shape.py.txt")
    result = reg.patch_configs(lazy, [{"class_name": "FlintConfig", "module": "vllm.models.flint.configs_v2"}], force=True)
    assert changed_lines(lazy, result.after) == ['-    "FlintConfig": "vllm.models.flint.configs",',
                                                 '+    "FlintConfig": "vllm.models.flint.configs_v2",']


def test_configs_long_value_follows_the_parenthesised_style():
    before = fixture("configs_init_0_33_shape.py.txt")
    result = reg.patch_configs(before, [{"class_name": "Qwen3_5MoeTextConfig", "module": "qwen3_5_moe"}])
    assert changed_lines(before, result.after) == [
        '+    "Qwen3_5MoeTextConfig": (',
        '+        "vllm.transformers_utils.configs.qwen3_5_moe"',
        '+    ),',
        '+    "Qwen3_5MoeTextConfig",',
    ]
    assert reg.describe_configs(result.after)["classes"]["Qwen3_5MoeTextConfig"] == "vllm.transformers_utils.configs.qwen3_5_moe"


@pytest.mark.parametrize("name, entry, message", [
    ("not_a_registry.py.txt", {"class_name": "Qwen3_5Config", "module": "qwen3_5"}, "this is not vLLM's transformers_utils/configs/__init__.py"),
    ("registry_0_14_shape.py.txt", {"class_name": "Qwen3_5Config", "module": "qwen3_5"}, "this is not vLLM's transformers_utils/configs/__init__.py"),
    ("configs_init_0_14_shape.py.txt", {"class_name": "Qwen3.5Config", "module": "qwen3_5"}, "entries[0]: class_name 'Qwen3.5Config' is not"),
    ("configs_init_0_14_shape.py.txt", {"class_name": "Qwen3_5Config", "module": "qwen3-5"}, "entries[0]: module 'qwen3-5' is not"),
    ("configs_init_0_14_shape.py.txt", {"class_name": "Qwen3_5Config"}, "entries[0]: module is required with state=present"),
    ("configs_init_0_14_shape.py.txt", {"class_name": "Qwen3_5Config", "module": "qwen3_5", "architecture": "X"},
     "entries[0]: architecture is not used with kind=configs"),
    ("configs_init_0_14_shape.py.txt", {"module": "qwen3_5"}, "entries[0]: class_name is required with kind=configs"),
])
def test_configs_refusals(name, entry, message):
    with pytest.raises(reg.RegistryError) as err:
        reg.patch_configs(fixture(name), [entry])
    assert str(err.value).startswith(message)
