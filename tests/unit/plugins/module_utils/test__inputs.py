# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the inventory's values checked against their grammar: addresses, secrets, names, image references,
model ids, revisions and directories; every problem names host, variable and fix, and never shows a secret."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _inputs as i


@pytest.mark.parametrize(("kind", "value"), [
    (i.IP, "192.168.100.11"), (i.IP, "fd00::11"),
    (i.SECRET_KIND, "lab-api-key-not-a-secret"), (i.SECRET_KIND, "hf_AbCdEf0123456789"), (i.SECRET_KIND, 31415926),
    (i.SECRET_KIND, "Az09._~+/=:@-"),
    (i.NAME_KIND, "pair1"), (i.NAME_KIND, "spark-1.example.com"), (i.NAME_KIND, "spark_pairs"),
    (i.IMAGE, "hellohal2064/vllm-qwen3.5-gb10:latest"), (i.IMAGE, "lab/vllm-qwen35:0.17"), (i.IMAGE, "python:3"),
    (i.IMAGE, "registry.example:5000/vllm/vllm-openai:v0.17.1"), (i.IMAGE, "nvcr.io/nvidia/vllm:25.09-py3"),
    (i.IMAGE, "localhost/dgxspark-vllm:hybrid-0f3a"), (i.IMAGE, "sha256:" + "0a" * 32),
    (i.IMAGE, "vllm/vllm-openai@sha256:" + "ab" * 32),
    (i.MODEL, "Qwen/Qwen3.5-122B-A10B-FP8"), (i.MODEL, "gpt2"), (i.MODEL, "meta-llama/Llama-3.1-8B_Instruct"),
    (i.MODEL_OR_PATH, "Qwen/Qwen3.5-122B-A10B-FP8"), (i.MODEL_OR_PATH, "/srv/m/x"),
    (i.REVISION_KIND, "main"), (i.REVISION_KIND, "refs/pr/12"), (i.REVISION_KIND, "0123abcd" * 5),
    (i.OWN_DIR, "/etc/dgxspark/transfer"), (i.OWN_DIR, "/opt/dgxspark/bin"), (i.OWN_DIR, "/var/tmp/dgxspark-hybrid"),
    (i.OWN_DIR, "/var/lib/dgxspark/gateway"), (i.OWN_DIR, "/srv/dgxspark"),
    (i.DATA_DIR, "/srv/dgxspark/models"), (i.DATA_DIR, "/data/models"), (i.DATA_DIR, "/home/nvidia/models"),
    (i.OWN_FILE, "/var/lib/dgxspark/deploy/record.json"), (i.OWN_FILE, "/var/lib/dgxspark/verified-images.json"),
    (i.BIND_KIND, "127.0.0.1"), (i.BIND_KIND, "0.0.0.0"), (i.BIND_KIND, "192.168.1.20"), (i.BIND_KIND, "::"),
])
def test_good_values_pass(kind, value):
    assert i.check_value("spark-1", "some_variable", value, kind) is None
    assert i.CHECKS[kind](value) == str(value)


@pytest.mark.parametrize(("kind", "value"), [
    (i.IP, '192.168.100.11",port-forwarding,permitopen="any'), (i.IP, "*"), (i.IP, "192.168.100.*"),
    (i.IP, "192.168.100.0/24"), (i.IP, "spark-2"), (i.IP, "fe80::1%x\n@cert-authority *"), (i.IP, "fe80::1%eth0"),
    (i.IP, "-f"), (i.IP, "192.168.100.11 "), (i.IP, ["192.168.100.11"]), (i.IP, True),
    (i.NAME_KIND, "pair 1"), (i.NAME_KIND, "pair1\n"), (i.NAME_KIND, "pair'1"), (i.NAME_KIND, "-pair"),
    (i.NAME_KIND, "p/1"),
    (i.IMAGE, "lab/vllm:0.17\nRUN rm -rf /"), (i.IMAGE, "Lab/VLLM:0.17"), (i.IMAGE, "lab/vllm:bad tag"),
    (i.IMAGE, "lab/vllm:"), (i.IMAGE, "-lab/vllm"), (i.IMAGE, "lab//vllm"), (i.IMAGE, "lab/vllm:" + "t" * 129),
    (i.IMAGE, "lab/vllm@sha256:zz"), (i.IMAGE, "--build-arg=x"),
    (i.MODEL, "../../etc"), (i.MODEL, "Qwen/../../etc"), (i.MODEL, "/srv/models/x"), (i.MODEL, "a/b/c"),
    (i.MODEL, "Qwen/Qwen3.5\n"), (i.MODEL, "Qwen/.hidden"), (i.MODEL, "Qwen/x--y"), (i.MODEL, "Qwen/x.."),
    (i.MODEL, "Qwen/" + "x" * 97),
    (i.MODEL_OR_PATH, "/srv/../etc"), (i.MODEL_OR_PATH, "x\ny"), (i.MODEL_OR_PATH, "/srv/m x"),
    (i.REVISION_KIND, "../main"), (i.REVISION_KIND, "main\n"), (i.REVISION_KIND, "-main"), (i.REVISION_KIND, "a b"),
    (i.OWN_DIR, "/etc"), (i.OWN_DIR, "/root"), (i.OWN_DIR, "/"), (i.OWN_DIR, "/opt"), (i.OWN_DIR, "/etc/ssh"),
    (i.OWN_DIR, "/etc/dgxspark/.."), (i.OWN_DIR, "/etc/dgxspark/../../root"), (i.OWN_DIR, "etc/dgxspark"),
    (i.OWN_DIR, "/etc/dgxspark/"), (i.OWN_DIR, "/etc//dgxspark"), (i.OWN_DIR, "/etc/dgxspark x"),
    (i.OWN_DIR, "/var/lib/docker"),
    (i.DATA_DIR, "/"), (i.DATA_DIR, "/etc"), (i.DATA_DIR, "/etc/models"), (i.DATA_DIR, "/usr/share/models"),
    (i.DATA_DIR, "/srv"), (i.DATA_DIR, "/srv/../etc"), (i.DATA_DIR, "models"), (i.DATA_DIR, "/srv/models\n"),
    # Security review M4: the record's directory is made 0700 on every deploy.
    (i.OWN_FILE, "/var/lib/dgxspark-record.json"), (i.OWN_FILE, "/etc/record.json"), (i.OWN_FILE, "/record.json"),
    (i.OWN_FILE, "/var/lib/dgxspark/"), (i.OWN_FILE, "/var/lib/dgxspark/.."), (i.OWN_FILE, "record.json"),
    (i.BIND_KIND, "localhost"), (i.BIND_KIND, "0.0.0.0 --api-key x"), (i.BIND_KIND, "*"),
    (i.SOURCES_KIND, ["0.0.0.0/0"]), (i.SOURCES_KIND, ["::/0"]), (i.SOURCES_KIND, ["10.0.0.0/7"]),
    (i.SOURCES_KIND, ["spark-2"]), (i.SOURCES_KIND, "192.168.100.0/24"), (i.SOURCES_KIND, ["192.168.100.0/24", "*"]),
])
def test_bad_values_are_refused_naming_host_variable_and_fix(kind, value):
    problem = i.check_value("spark-2", "the_variable", value, kind)
    assert problem and problem.startswith("host spark-2: the_variable ")
    assert "; set it to" in problem or ": set it to" in problem
    with pytest.raises(i.InputError):
        i.CHECKS[kind](value)


@pytest.mark.parametrize(("value", "what"), [
    ("s3cr3t\nVLLM_ALLOW=1", "a newline"), ("s3cr3t\r", "a newline"), ('key"x', "a quote"), ("key'x", "a quote"),
    ("two words", "a blank"), ("tab\there", "a blank"), ("back\\slash", "a backslash"), ("nul\x00", "a control"),
    ("caf\u00e9-key", "outside printable ASCII"), ("a,b-long-key", "a comma"), ("short", "has 5 characters"),
    ("x" * 513, "has 513 characters"), ("dollar$key", "a character other than A-Z a-z 0-9"),
])
def test_a_secret_is_refused_without_showing_it(value, what):
    problem = i.check_value("spark-1", "dgxspark_api_key", value)
    assert problem.startswith("host spark-1: dgxspark_api_key ") and what in problem
    assert "the value is not shown" in problem and "openssl rand" in problem and "set it to 8 to 512" in problem
    hidden = value.replace("\n", "").replace("\r", "")
    assert hidden not in problem and value not in problem


def test_unset_or_empty_values_are_left_to_the_roles():
    assert i.check_host("spark-1", {"dgxspark_api_key": "", "node_trust_dir": None, "dgxspark_model": ""}) == []


def test_check_host_names_every_problem_and_the_host_itself():
    problems = i.check_host("spark 1", {"node_trust_dir": "/etc", "dgxspark_image": "Bad Image",
                                        "dgxspark_fabric_ip": "*", "dgxspark_api_key": "fine-key",
                                        "unrelated_variable": "/etc"})
    assert len(problems) == 4
    assert problems[0].startswith("host 'spark 1': its inventory name must be")
    assert any(p.startswith("host spark 1: node_trust_dir is '/etc', which is not a directory of the collection's "
                            "own") and "e.g. /etc/dgxspark/transfer" in p for p in problems)
    assert any(p.startswith("host spark 1: dgxspark_image is 'Bad Image', not an image reference") for p in problems)
    assert any(p.startswith("host spark 1: dgxspark_fabric_ip is '*', not an IP address") for p in problems)


def test_every_default_of_the_roles_passes():
    """The roles' own defaults for the variables checked here are all accepted (an untouched inventory passes)."""
    import pathlib

    import yaml

    roles = pathlib.Path(__file__).resolve().parents[4] / "roles"
    seen = 0
    for defaults in roles.glob("*/defaults/main.yml"):
        for variable, value in (yaml.safe_load(defaults.read_text()) or {}).items():
            if variable in i.VARIABLES and isinstance(value, str) and "{{" not in value:
                seen += 1
                assert i.check_value("spark-1", variable, value) is None, (defaults, variable, value)
    assert seen >= 15


@pytest.mark.parametrize(("fabric", "message"), [
    ({"ip": "*"}, "host s2: the fabric IP it reported (dgxspark_node.fabric.ip) is '*', not an IP address"),
    ({"ip": '10.0.0.2",permitopen="any'}, "dgxspark_node.fabric.ip"),
    ({"lan_ip": "10.0.0.2\n"}, "the LAN IP it reported (dgxspark_node.fabric.lan_ip)"),
    ({"interface": "eth0 -f"}, "the interface it reported (dgxspark_node.fabric.interface)"),
    ({"lan_interface": "a" * 16}, "dgxspark_node.fabric.lan_interface"),
    ({"env": {"NCCL_SOCKET_IFNAME": "eth0\nVLLM_API_KEY=x"}}, "the environment it reported"),
    ({"env": {"BAD NAME": "1"}}, "the environment it reported"),
])
def test_a_fabric_a_node_reports_is_checked(fabric, message):
    problems = i.check_fabric("s2", fabric)
    assert len(problems) == 1 and message in problems[0] and "set dgxspark_fabric_interface" in problems[0]


def test_a_good_fabric_passes():
    assert i.check_fabric("s1", {"ip": "192.168.100.11", "lan_ip": "10.0.0.11", "interface": "enp1s0f1np1",
                                 "lan_interface": "enP7s7", "env": {"NCCL_IB_HCA": "=rocep1s0f1:1",
                                                                    "VLLM_HOST_IP": "192.168.100.11"}}) == []


# The first real run (issue 33, notes/first-run.md part B): what an operator leaves in the inventory by mistake.

PLACEHOLDERS = ["change-me", "CHANGE_ME", "changeme", "Change.Me", "replace-me", "your-api-key", "YOUR_API_KEY",
                "your-key-here", "yourtoken", "secret", "Secret123", "password", "passw0rd", "example",
                "example-api-key", "xxxxxxxx", "XXXXXXXXXXXXXXXX", "00000000", "aaaaaaaaaa", "<your-api-key>",
                "<key>", "token", "apikey", "api-key", "api_key", "my-secret-key", "insert-token-here",
                "hf_xxxxxxxxxxxxxxxxxxxx", "hf_token", "sk-xxxxxxxxxxxx", "placeholder", "dummy-key", "12345678",
                "1234567890", "abcdefgh", "todo-change-me", "fixme", "the-api-key"]


@pytest.mark.parametrize("value", PLACEHOLDERS)
@pytest.mark.parametrize("variable", ["dgxspark_api_key", "vllm_serve_api_key", "gateway_engine_api_key"])
def test_an_operator_who_leaves_a_placeholder_api_key_is_refused_without_seeing_it(variable, value):
    """fails at 13f6075: the example vault's change-me (9 characters) and the other obvious placeholders passed the
    8 to 512 grammar and went live as the key."""
    problem = i.check_value("spark-a1", variable, value)
    assert problem is not None, value
    assert problem.startswith(f"host spark-a1: {variable} is a placeholder, not a key (the value is not shown); ")
    assert "`openssl rand -hex 32`" in problem and "group_vars/all/vault.yml" in problem
    # the same sentence whatever the value: it cannot show it
    assert problem == i.check_value("spark-a1", variable, "xxxxxxxx") and "change-me" not in problem


@pytest.mark.parametrize("value", ["change-me", "hf_xxxxxxxxxxxxxxxxxxxx", "your-hf-token", "<hf-token>", "token",
                                   "YOUR_HUGGINGFACE_TOKEN", "hf_token_here"])
@pytest.mark.parametrize("variable", ["dgxspark_hf_token", "model_sync_hf_token"])
def test_an_operator_who_leaves_a_placeholder_hf_token_is_told_where_tokens_come_from(variable, value):
    """fails at 13f6075: a placeholder Hugging Face token passed, and the download got a 401 hours into the run."""
    problem = i.check_value("spark-a1", variable, value)
    assert problem is not None, value
    assert problem.startswith(f"host spark-a1: {variable} is a placeholder, not a token (the value is not shown); ")
    assert "https://huggingface.co/settings/tokens" in problem and "group_vars/all/vault.yml" in problem
    assert problem == i.check_value("spark-a1", variable, "hf_xxxxxxxx") and "change-me" not in problem


@pytest.mark.parametrize("value", ["lab-api-key-not-a-secret", "second-client-key-123", "hf_labSENTINELtoken7c1d0e",
                                   "hf_AbCdEf0123456789", "0f1e2d3c4b5a69788796a5b4c3d2e1f0" * 2, "fine-key",
                                   "K7q/9Zp+Xw==", "wrong-key-xyz", "31415926"])
def test_keys_an_operator_really_made_pass(value):
    """A real key (openssl rand -hex 32, an hf_ token, the lab's key) is no placeholder: the check refuses only the
    obvious ones."""
    assert i.placeholder(value) is False
    assert i.check_value("spark-a1", "dgxspark_api_key", value) is None
    assert i.check_value("spark-a1", "dgxspark_hf_token", value) is None


def test_an_operator_who_fills_the_vaults_hf_token_but_never_maps_it_is_told_the_line_to_add():
    """fails at 13f6075: vault_dgxspark_hf_token was filled in the vault, nothing mapped it to dgxspark_hf_token,
    and a gated model's download got a 401 after the run had started."""
    problems = i.check_secrets("spark-a1", {"vault_dgxspark_hf_token": "hf_AbCdEf0123456789",
                                            "dgxspark_api_key": "fine-key-1234"})
    assert problems == [
        "host spark-a1: vault_dgxspark_hf_token is set (in the vault) but dgxspark_hf_token is not, so nothing uses "
        "it; add the line dgxspark_hf_token: \"{{ vault_dgxspark_hf_token }}\" to group_vars/all/main.yml"]
    assert "hf_AbCdEf0123456789" not in problems[0]


def test_any_vault_value_of_a_collection_variable_left_unmapped_is_named():
    """fails at 13f6075: the same for every variable the collection reads (here the API key itself)."""
    problems = i.check_secrets("spark-a1", {"vault_dgxspark_api_key": "0f1e2d3c4b5a6978"})
    assert len(problems) == 1
    assert problems[0].startswith("host spark-a1: vault_dgxspark_api_key is set (in the vault) but dgxspark_api_key is not")
    assert 'dgxspark_api_key: "{{ vault_dgxspark_api_key }}"' in problems[0] and "0f1e2d3c4b5a6978" not in problems[0]


def test_a_vault_value_that_is_mapped_empty_or_used_under_another_name_is_fine():
    assert i.check_secrets("s1", {"vault_dgxspark_hf_token": "hf_AbCdEf0123456789",
                                  "dgxspark_hf_token": "hf_AbCdEf0123456789"}) == []
    assert i.check_secrets("s1", {"vault_dgxspark_hf_token": ""}) == []
    assert i.check_secrets("s1", {"vault_dgxspark_hf_token": None}) == []
    # mapped straight into the role's own variable: the raw (untemplated) values show who uses it
    assert i.check_secrets("s1", {"vault_dgxspark_hf_token": "hf_AbCdEf0123456789"},
                           raw={"model_sync_hf_token": "{{ vault_dgxspark_hf_token }}"}) == []
    assert i.check_secrets("s1", {"vault_dgxspark_hf_token": "hf_AbCdEf0123456789"},
                           raw={"model_sync_hf_token": "{{ vault_dgxspark_hf_token_old }}"}) != []
    # vault_ names the collection does not read are the operator's own business
    assert i.check_secrets("s1", {"vault_my_own_password": "x"}) == []


def test_a_vault_value_that_cannot_be_read_counts_as_set_and_is_never_shown():
    """An inline !vault value read without its password: it is there, so an unmapped one is still named."""
    problems = i.check_secrets("s1", {"vault_dgxspark_hf_token": i.Unreadable()})
    assert len(problems) == 1 and "dgxspark_hf_token: \"{{ vault_dgxspark_hf_token }}\"" in problems[0]


@pytest.mark.parametrize(("values", "named"), [
    ({}, "dgxspark_api_key (the clients' key) is not set"),
    # The engine's own key is no client key (security review L7): the clients still have none.
    ({"vllm_serve_api_key": "fine-key-1234"}, "dgxspark_api_key (the clients' key) is not set"),
    ({"dgxspark_api_key": ""}, "dgxspark_api_key is empty"),
    ({"dgxspark_api_key": None}, "dgxspark_api_key is empty"),
    ({"dgxspark_api_key": "unreadable"}, "dgxspark_api_key cannot be read (vault_dgxspark_api_key is undefined"),
])
def test_an_operator_who_forgets_the_api_key_is_stopped_before_the_download(values, named):
    """fails at 13f6075: a missing or empty key was caught only by vllm_serve, after the 119 GB download, the build
    and the sync."""
    # "unreadable": the template's variable is undefined (no vault.yml, or a typo in its name)
    values = {k: i.Unreadable("vault_dgxspark_api_key") if v == "unreadable" else v for k, v in values.items()}
    problems = i.check_secrets("spark-a1", values, require_api_key=True)
    assert len(problems) == 1, problems
    assert problems[0].startswith("host spark-a1: no API key for the clients: " + named), problems[0]
    assert "`openssl rand -hex 32`" in problems[0] and "vllm_serve_allow_no_api_key: true" in problems[0]
    assert 'dgxspark_api_key: "{{ vault_dgxspark_api_key }}"' in problems[0]


def test_a_key_or_an_explicit_no_key_serves_and_playbooks_that_do_not_serve_need_none():
    assert i.check_secrets("s1", {"dgxspark_api_key": "fine-key-1234"}, require_api_key=True) == []
    assert i.check_secrets("s1", {"dgxspark_api_key": "fine-key-1234", "vllm_serve_api_key": ""},
                           require_api_key=True) == []
    assert i.check_secrets("s1", {"dgxspark_api_key": "fine-key-1234", "vllm_serve_api_key": "engine-key-5678"},
                           require_api_key=True) == []
    assert i.check_secrets("s1", {"vllm_serve_allow_no_api_key": True}, require_api_key=True) == []
    assert i.check_secrets("s1", {"vllm_serve_allow_no_api_key": "true"}, require_api_key=True) == []
    assert i.check_secrets("s1", {"vllm_serve_allow_no_api_key": "false"}, require_api_key=True) != []
    # status, teardown, collect_logs: no key needed
    assert i.check_secrets("s1", {}) == []
    assert i.check_secrets("s1", {"dgxspark_api_key": i.Unreadable("vault_dgxspark_api_key")}) == []


def test_a_value_that_cannot_be_read_is_left_to_the_role_by_the_grammar_checks():
    assert i.check_host("s1", {"dgxspark_api_key": i.Unreadable("vault_dgxspark_api_key")}) == []


@pytest.mark.parametrize("value", ["sometimes", "Always", "true", "pull"])
def test_dgxspark_image_pull_other_than_missing_always_never_is_refused_at_the_first_task(value):
    """Issue 33, 2: dgxspark_image_pull (new) is checked with the inventory's other values, before any task changes a
    node; at 13f6075 it did not exist (no check, no pull)."""
    problem = i.check_value("spark-1", "dgxspark_image_pull", value)
    assert problem.startswith(f"host spark-1: dgxspark_image_pull is {value!r}; set it to missing"), problem
    assert i.check_host("spark-1", {"dgxspark_image_pull": value}) == [problem]
    for good in ("missing", "always", "never"):
        assert i.check_value("spark-1", "dgxspark_image_pull", good) is None


@pytest.mark.parametrize("variable", ["deploy_state_path", "hybrid_image_record", "model_sync_hf_token_dir",
                                      "monitoring_config_dir", "monitoring_data_dir", "vllm_serve_host",
                                      "node_trust_allowed_from"])
def test_m4_l6_the_review_variables_are_checked_centrally(variable):
    """Security review M3, M4 and L6: these variables reached chmod, rm -r, the engine's bind and from= unchecked."""
    bad = {"deploy_state_path": "/var/lib/dgxspark-record.json", "hybrid_image_record": "/var/lib/x.json",
           "model_sync_hf_token_dir": "/etc", "monitoring_config_dir": "/etc/prometheus-dgxspark-x/..",
           "monitoring_data_dir": "/var/lib/prometheus", "vllm_serve_host": "0.0.0.0;x",
           "node_trust_allowed_from": ["0.0.0.0/0"]}[variable]
    problems = i.check_host("spark-1", {variable: bad})
    assert len(problems) == 1 and problems[0].startswith(f"host spark-1: {variable} ") and "set it to" in problems[0]


def test_m3_a_wildcard_bind_behind_gateways_needs_the_opt_in():
    """Security review M3: an engine on 0.0.0.0 behind gateways was reported safe. Now it is refused, naming the
    host, the variable and the fix, unless vllm_serve_allow_wildcard_host is true; without gateways it is the
    operator's choice."""
    for value in ("0.0.0.0", "::"):
        problems = i.check_exposure("spark-1", {"vllm_serve_host": value}, gateways=True)
        assert len(problems) == 1 and problems[0].startswith(f"host spark-1: vllm_serve_host is {value}")
        assert "vllm_serve_allow_wildcard_host: true" in problems[0]
        assert i.check_exposure("spark-1", {"vllm_serve_host": value, "vllm_serve_allow_wildcard_host": True}, True) == []
        assert i.check_exposure("spark-1", {"vllm_serve_host": value}, gateways=False) == []
    assert i.check_exposure("spark-1", {"vllm_serve_host": "127.0.0.1"}, gateways=True) == []
    assert i.check_exposure("spark-1", {}, gateways=True) == []


@pytest.mark.parametrize("variable", ["dgxspark_metrics_dir", "watchdog_metrics_dir", "monitoring_textfile_dir"])
def test_m5_the_textfile_directory_is_checked_and_may_be_the_sites_own(variable):
    """The watchdog writes its verdict for Prometheus there (review M5): never a system directory or under one, and
    a node exporter's textfile directory the site keeps already is accepted."""
    for bad in ("/etc", "/var/lib", "relative/metrics", "/run/metrics", "/var/lib/dgxspark/../../etc"):
        problems = i.check_host("spark-1", {variable: bad})
        assert len(problems) == 1 and problems[0].startswith(f"host spark-1: {variable} ") and "set it to" in problems[0]
    for good in ("/var/lib/dgxspark/metrics", "/var/lib/prometheus/node-exporter"):
        assert i.check_host("spark-1", {variable: good}) == []


@pytest.mark.parametrize("require_api_key", [True, False])
def test_l7_an_engine_key_that_is_a_client_key_is_refused_naming_the_fix(require_api_key):
    """Security review L7: at 4d7e9fc the engine's key defaulted to the clients' key, shared by every cluster. Each
    cluster now makes its own; one set to a client's key is refused, naming the variable and the fix, never the key."""
    problems = i.check_secrets("s1", {"dgxspark_api_key": "shared-key-1234", "vllm_serve_api_key": "shared-key-1234"},
                               require_api_key=require_api_key)
    assert len(problems) == 1 and "shared-key-1234" not in problems[0], problems
    assert problems[0].startswith("host s1: vllm_serve_api_key is the same key as dgxspark_api_key")
    assert "remove the line that sets vllm_serve_api_key" in problems[0]


def test_the_metrics_key_each_door_admits_is_the_one_prometheus_sends():
    heads = {"s1": {"dgxspark_api_key": "client-key-0123"}, "s3": {"monitoring_engine_api_key": "metrics-0123"}}
    monitors = {"mon1": {"monitoring_engine_api_key": "metrics-0123"}}
    problems = i.check_metrics_key(heads, monitors)
    assert len(problems) == 1 and problems[0].startswith("host s1: its door admits the metrics key of dgxspark_api_key")
    assert "metrics-0123" not in problems[0] and "client-key-0123" not in problems[0]
    # A value that cannot be read (an undefined template, a vault without its password) is left to the roles.
    unread = i.unreadable(ValueError("'vault_metrics' is undefined"))
    assert i.check_metrics_key(heads, {"mon1": {"monitoring_engine_api_key": unread}}) == []
    assert i.check_metrics_key({"s1": {"gateway_door_metrics_api_key": unread}}, monitors) == []
    assert i.check_metrics_key(heads, {"mon1": {}}) == []
    # An engine on the LAN (vllm_serve_host) has no door: Prometheus reads its /metrics, which asks for no key.
    assert i.check_metrics_key({"s1": {**heads["s1"], "vllm_serve_host": "10.0.0.11"}}, monitors) == []
