# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory's values checked against their grammar before any of them reaches a file, a line or an argv.

Addresses go into authorized_keys' from=, known_hosts, ping and ssh; keys and tokens into env files; image names
into a Dockerfile's FROM; model ids into paths; directories are made 0700 or removed whole. Each check here is pure
Python over plain values, run by the action plugin dgxspark.vllm.fleet at the start of every playbook, before any
task changes a node. A problem is a sentence naming the host, the variable and the fix; a secret's value is never
repeated in it.

Besides the grammar, the secrets an operator handles on a first run (issue 33): a key or token left as a placeholder
(placeholder()), a vault value of a collection variable that nothing maps (vault_dgxspark_hf_token filled, but no
dgxspark_hf_token), and, for the playbooks that serve, no API key at all (check_secrets()).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils._container_logs import LogsError, container_logs
from ansible_collections.dgxspark.vllm.plugins.module_utils._ssh_trust import MIN_PREFIX

# Plain absolute paths: what authorized_keys' command= and the roles' argv take without quoting.
PLAIN_PATH = re.compile(r"^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
# A name: an inventory host, a cluster, a group.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
# A Hugging Face repository id: [namespace/]name, letters, digits, '-', '_' and '.', neither starting nor ending
# with '-' or '.', without '--' or '..', at most 96 characters a part.
HF_PART = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
# A revision: a branch, a tag or a commit (git's ref names, restricted to the characters Hugging Face uses).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
# An image reference (the Docker distribution grammar): [domain[:port]/]path[:tag][@digest].
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
# A secret (API key, token): what the gateway takes as a client or engine key (module_utils/_gateway.py), so that a
# key the deployment accepts is one the gateway accepts too; no blank, quote, comma, backslash or newline, which would
# end an env file's or a configuration's line or value early.
SECRET = re.compile(r"^[A-Za-z0-9._~+/=:@-]{8,512}$")

# Obvious placeholders for a key or a token: what an example or a template leaves for the operator to replace. A value
# is one when, compared case-insensitively with the separators - _ . : / + = ~ @ and blanks dropped, it is
#  - in angle brackets, square brackets or ${...} (<your-api-key>, [token], ${API_KEY});
#  - one character repeated (xxxxxxxx, 00000000, ********), also after an hf_ or sk- prefix (hf_xxxx, sk-xxxx);
#  - a run of the digits, the alphabet or a keyboard row (12345678, abcdefgh, qwertyui);
#  - one of PLACEHOLDER_WORDS, with up to 4 digits after it (changeme, secret123, password1);
#  - words of PLACEHOLDER_PARTS only, one of them a key, a token, a secret or a password, with up to 4 digits after
#    them (your-api-key, YOUR_HF_TOKEN, insert-token-here, my-secret-key, the-api-key, example-api-key).
# A key made by a tool (`openssl rand -hex 32`, an hf_ token of Hugging Face) is none of these.
PLACEHOLDER_WORDS = frozenset((
    "changeme", "changethis", "changeit", "replaceme", "replacethis", "replaceit", "fillme", "fillmein", "setme",
    "editme", "updateme", "example", "sample", "placeholder", "dummy", "fake", "test", "testing", "demo", "default",
    "todo", "tbd", "fixme", "none", "null", "nil", "undefined", "unset", "notset", "empty", "redacted", "secret",
    "password", "passwd", "passw0rd", "letmein", "token", "apikey", "key", "foobar", "foo", "bar"))
PLACEHOLDER_PARTS = frozenset((
    "your", "yours", "my", "our", "the", "a", "an", "insert", "enter", "put", "paste", "add", "replace", "change",
    "set", "edit", "fill", "update", "new", "real", "own", "some", "generated", "example", "sample", "dummy", "fake",
    "test", "demo", "default", "placeholder", "todo", "fixme", "hf", "huggingface", "hugging", "face", "openai",
    "vllm", "gateway", "engine", "api", "access", "auth", "bearer", "serving", "server", "client", "read", "write",
    "key", "token", "secret", "password", "passwd", "pass", "pwd", "here", "goes", "please", "this", "me", "it", "in"))
_PLACEHOLDER_NOUNS = ("key", "token", "secret", "passw", "pwd", "changeme", "replaceme")
_PLACEHOLDER_SEPARATORS = re.compile(r"[-_.:/+=~@\s]+")
_PLACEHOLDER_RUNS = ("01234567890", "abcdefghijklmnopqrstuvwxyz", "qwertyuiop", "asdfghjkl", "zxcvbnm")

# The system's own directories (and the trees a directory of the collection never lies in).
SYSTEM_DIRS = frozenset(("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
                         "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/local",
                         "/var", "/var/lib", "/var/log", "/var/tmp", "/var/cache", "/var/run", "/data"))
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/run")

# What each variable is, and how to fix it. Checked where the inventory (or -e) sets it; the roles' defaults pass.
IP = "ip"
SECRET_KIND = "secret"
HF_TOKEN_KIND = "hf_token"
NAME_KIND = "name"
IMAGE = "image"
MODEL = "model"
MODEL_OR_PATH = "model_or_path"
REVISION_KIND = "revision"
PULL_KIND = "pull"
OWN_DIR = "own_dir"
OWN_FILE = "own_file"
DATA_DIR = "data_dir"
BIND_KIND = "bind"
SOURCES_KIND = "sources"
LOGS_KIND = "logs"
TEXTFILE_DIR = "textfile_dir"

VARIABLES = {
    "dgxspark_fabric_ip": IP,
    "preflight_fabric_ip": IP,
    "dgxspark_api_key": SECRET_KIND,
    "vllm_serve_api_key": SECRET_KIND,
    "gateway_engine_api_key": SECRET_KIND,
    "dgxspark_hf_token": HF_TOKEN_KIND,
    "model_sync_hf_token": HF_TOKEN_KIND,
    "dgxspark_cluster": NAME_KIND,
    "dgxspark_pair": NAME_KIND,
    "dgxspark_fleet_group": NAME_KIND,
    "dgxspark_gateway_group": NAME_KIND,
    "dgxspark_image": IMAGE,
    "dgxspark_image_pull": PULL_KIND,
    "image_pull_policy": PULL_KIND,
    "hybrid_image_source": IMAGE,
    "hybrid_image_base": IMAGE,
    "dgxspark_model": MODEL,
    "model_sync_model": MODEL,
    "vllm_serve_model": MODEL_OR_PATH,  # or an absolute path in the container
    "dgxspark_model_revision": REVISION_KIND,
    "model_sync_revision": REVISION_KIND,
    # Directories the collection makes 0700, empties or removes whole (teardown, state: absent).
    "node_trust_dir": OWN_DIR,
    "node_trust_program_dir": OWN_DIR,
    "watchdog_program_dir": OWN_DIR,
    "watchdog_config_dir": OWN_DIR,
    "watchdog_state_dir": OWN_DIR,
    "gateway_config_dir": OWN_DIR,
    "gateway_door_config_dir": OWN_DIR,
    "gateway_run_dir": OWN_DIR,
    "hybrid_image_build_dir": OWN_DIR,
    "vllm_serve_config_dir": OWN_DIR,
    "ray_cluster_config_dir": OWN_DIR,
    "ray_cluster_launcher_dir": OWN_DIR,
    "rollout_config_dir": OWN_DIR,
    "model_sync_hf_token_dir": OWN_DIR,
    "monitoring_config_dir": OWN_DIR,
    "monitoring_data_dir": OWN_DIR,
    # The node exporter's textfile directory: the collection writes and removes its own file in it, nothing else.
    "dgxspark_metrics_dir": TEXTFILE_DIR,
    "watchdog_metrics_dir": TEXTFILE_DIR,
    "monitoring_textfile_dir": TEXTFILE_DIR,
    # Files of the collection's own, whose directory is made 0700.
    "deploy_state_path": OWN_FILE,
    "hybrid_image_record": OWN_FILE,
    # The engine's bind address, and the sources sshd admits the transfer keys from.
    "vllm_serve_host": BIND_KIND,
    "node_trust_allowed_from": SOURCES_KIND,
    # Directories of weights: files in a model's directory are replaced and removed by a sync.
    "dgxspark_models_dir": DATA_DIR,
    "model_sync_models_dir": DATA_DIR,
    "vllm_serve_models_dir": DATA_DIR,
    "node_trust_models_root": DATA_DIR,
    # How every long-running container keeps its logs (module_utils/_container_logs.py).
    "dgxspark_container_logs": LOGS_KIND,
}


class InputError(ValueError):
    """A value that must not reach a file, a line or an argv; its message says what is wrong and the fix."""


def _text(value, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"is a {type(value).__name__}, not a string: {what}")
    return str(value)


def _components(path: str) -> list[str]:
    return path.split("/")[1:]


def ip(value) -> str:
    """VALUE as an IP address (the text ipaddress accepts; no name, pattern, network or quote)."""
    text = _text(value, "set it to an IP address such as 192.168.100.11")
    try:
        # ipaddress takes an IPv6 scope (fe80::1%...) of any characters, a blank or newline included: none here.
        if "%" not in text:
            return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    raise InputError(f"is {text!r:.80}, not an IP address; set it to one IP address such as 192.168.100.11 "
                     "(no name, network, pattern, IPv6 scope or quote)")


def _words(text: str, parts) -> bool:
    """Whether TEXT is a concatenation of PARTS (a word break, linear in TEXT's length)."""
    ends = [True] + [False] * len(text)
    for start in range(len(text)):
        if ends[start]:
            for part in parts:
                if text.startswith(part, start):
                    ends[start + len(part)] = True
    return ends[len(text)]


def placeholder(value) -> bool:
    """Whether VALUE is an obvious placeholder for a key or a token (the rules above PLACEHOLDER_WORDS)."""
    if not isinstance(value, str) or not value:
        return False
    text = value.strip()
    if (text[:1], text[-1:]) in (("<", ">"), ("[", "]"), ("{", "}")) or text.startswith("${"):
        return True
    if len(set(text)) == 1:
        return True
    folded = _PLACEHOLDER_SEPARATORS.sub("", text.lower())
    if not folded:
        return True
    for prefix in ("hf", "sk"):
        rest = folded[len(prefix):] if folded.startswith(prefix) else ""
        if rest and len(set(rest)) == 1:
            return True
    if len(set(folded)) == 1 or any(len(folded) >= 6 and folded in run for run in _PLACEHOLDER_RUNS):
        return True
    words = folded.rstrip("0123456789")
    if len(folded) - len(words) > 4 or not words:
        return False
    return words in PLACEHOLDER_WORDS or (any(noun in words for noun in _PLACEHOLDER_NOUNS)
                                          and _words(words, PLACEHOLDER_PARTS))


_PLACEHOLDER_FIX = {
    "key": "generate a real one with `openssl rand -hex 32`, put it in group_vars/all/vault.yml (vault_dgxspark_api_key) "
           "and encrypt that file with `ansible-vault encrypt`",
    "token": "create a read token at https://huggingface.co/settings/tokens, put it in group_vars/all/vault.yml "
             "(vault_dgxspark_hf_token) and encrypt that file with `ansible-vault encrypt`, or leave it empty for a "
             "model that is not gated",
}


def secret(value, what: str = "key") -> str:
    """VALUE as a secret for an env file or a configuration line (the value itself is never shown): WHAT (a key or a
    token) of the grammar SECRET, and no placeholder."""
    text = _text(value, "set it to the key or token as one quoted word")
    if len(text) <= 512 and placeholder(text):
        raise InputError(f"is a placeholder, not a {what} (the value is not shown); {_PLACEHOLDER_FIX[what]}")
    if not text or SECRET.fullmatch(text):
        return text
    bad = [what for what, found in (("a newline", "\n" in text or "\r" in text),
                                    ("a control character", any(ord(c) < 32 and c not in "\r\n" or ord(c) == 127
                                                                for c in text)),
                                    ("a blank", " " in text or "\t" in text),
                                    ("a quote", "'" in text or '"' in text),
                                    ("a backslash", "\\" in text),
                                    ("a comma", "," in text),
                                    ("a character outside printable ASCII", any(ord(c) > 127 for c in text)))
           if found]
    if bad:
        said = "contains " + " and ".join(bad)
    elif not 8 <= len(text) <= 512:
        said = f"has {len(text)} characters"
    else:
        said = "contains a character other than A-Z a-z 0-9 . _ ~ + / = : @ -"
    raise InputError(f"{said} (the value is not shown); set it to 8 to 512 of the characters A-Z a-z 0-9 . _ ~ + / = : @ - (what "
                     "the gateway accepts), e.g. generated with `openssl rand -hex 32`")


def hf_token(value) -> str:
    """VALUE as a Hugging Face token: a secret, and no placeholder (the fix says where tokens come from)."""
    return secret(value, what="token")


def name(value) -> str:
    text = _text(value, "set it to a name of letters, digits, '_', '.' and '-'")
    if not NAME.fullmatch(text):
        raise InputError(f"is {text!r:.80}; set it to a name of letters, digits, '_', '.' and '-' (at most 63, "
                         "starting with a letter or digit)")
    return text


def image(value) -> str:
    """VALUE as an image reference ([registry[:port]/]repository[:tag][@digest], or sha256:<id>)."""
    text = _text(value, "set it to an image reference such as registry.example/vllm/vllm-openai:v0.17.1")
    if IMAGE_ID.fullmatch(text) or (IMAGE_REF.fullmatch(text) and len(text.split("@", maxsplit=1)[0]) <= 255):
        return text
    raise InputError(f"is {text!r:.120}, not an image reference; set it to [registry[:port]/]repository[:tag]"
                     "[@digest] with a lowercase repository, e.g. hellohal2064/vllm-qwen3.5-gb10:latest")


def model(value) -> str:
    """VALUE as a Hugging Face repository id ([namespace/]name): the last part names the model's directory."""
    text = _text(value, "set it to a Hugging Face id such as Qwen/Qwen3.5-122B-A10B-FP8")
    parts = text.split("/")
    if 1 <= len(parts) <= 2 and all(HF_PART.fullmatch(p) and ".." not in p and "--" not in p for p in parts):
        return text
    raise InputError(f"is {text!r:.120}, not a Hugging Face id; set it to namespace/name of letters, digits, '-', "
                     "'_' and '.' (no '..', '--', leading or trailing '.' or '-'), e.g. Qwen/Qwen3.5-122B-A10B-FP8")


def model_or_path(value) -> str:
    """VALUE as a Hugging Face id, or a plain absolute path (of the model inside the serving container)."""
    text = _text(value, "set it to a Hugging Face id or an absolute path")
    if text.startswith("/") and _plain_path(text):
        return text
    try:
        return model(text)
    except InputError:
        raise InputError(f"is {text!r:.120}, neither a Hugging Face id nor a plain absolute path; set it to "
                         "namespace/name (e.g. Qwen/Qwen3.5-122B-A10B-FP8) or to a path of letters, digits, '/', "
                         "'.', '_' and '-' without '.' or '..' components") from None


def revision(value) -> str:
    text = _text(value, "set it to a branch, tag or commit")
    if REVISION.fullmatch(text) and ".." not in text and "//" not in text and not text.endswith(("/", ".lock")):
        return text
    raise InputError(f"is {text!r:.120}; set it to a branch, tag or commit id (letters, digits, '.', '_', '-', '/'; "
                     "no '..'), e.g. main")


PULL_POLICIES = ("missing", "always", "never")


def pull_policy(value) -> str:
    """When the head pulls dgxspark_image (role image_pull)."""
    text = _text(value, "set it to missing, always or never")
    if text in PULL_POLICIES:
        return text
    raise InputError(f"is {text!r:.60}; set it to missing (pull when the node lacks the image, the default), always "
                     "(pull a newer image under the tag every run) or never (pull nothing)")


def _plain_path(text: str) -> bool:
    return bool(PLAIN_PATH.fullmatch(text)) and not any(p in (".", "..") for p in _components(text))


def own_dir(value) -> str:
    """VALUE as a directory of the collection's own (one that may be made 0700 or removed whole): a plain absolute
    path with a component named dgxspark..., so never the system's /, /etc, /root, /opt or /var/lib."""
    text = _text(value, "set it to a directory of the collection's own, such as /etc/dgxspark/transfer")
    if _plain_path(text) and text not in SYSTEM_DIRS and any(p.startswith("dgxspark") for p in _components(text)):
        return text
    raise InputError(f"is {text!r:.120}, which is not a directory of the collection's own (the collection makes it "
                     "0700 and removes it whole); set it to a plain absolute path with a component named dgxspark..., "
                     "e.g. /etc/dgxspark/transfer, or leave it unset for the default")


def own_file(value) -> str:
    """VALUE as a file of the collection's own: a plain absolute path in a directory own_dir accepts (the collection
    makes that directory 0700)."""
    text = _text(value, "set it to a file in a directory of the collection's own, such as /var/lib/dgxspark/deploy/record.json")
    parent, _slash, base = text.rpartition("/")
    try:
        own_dir(parent)
    except InputError:
        raise InputError(f"is {text!r:.120}, whose directory is not one of the collection's own (the collection makes "
                         "it 0700); set it to a plain absolute path in a directory with a component named dgxspark..., "
                         "e.g. /var/lib/dgxspark/deploy/record.json, or leave it unset for the default") from None
    if not base or base in (".", ".."):
        raise InputError(f"is {text!r:.120}, which names no file; set it to a file such as "
                         "/var/lib/dgxspark/deploy/record.json")
    return text


def bind(value) -> str:
    """VALUE as the engine's bind address: an IP address (the loopback, the node's LAN address, or a wildcard)."""
    text = _text(value, "set it to an IP address such as 127.0.0.1")
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise InputError(f"is {text!r:.120}, which is no IP address; set it to an IP address the engine binds (127.0.0.1 "
                         "behind a gateway, the head's LAN address without one), or leave it unset") from None
    return text


def sources(value) -> list:
    """VALUE as the networks sshd admits the transfer keys from: a list of IP addresses or networks, none wider than
    a /8 (IPv4) or a /16 (IPv6)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InputError(f"is a {type(value).__name__}, not a list; set it to a list of addresses or networks, such as "
                         "[192.168.100.0/24]")
    for item in value:
        text = _text(item, "set each to an address or a network, such as 192.168.100.0/24")
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise InputError(f"holds {text!r:.80}, which is no IP address or network; set it to a list of addresses or "
                             "networks, such as [192.168.100.0/24]") from None
        if network.prefixlen < MIN_PREFIX[network.version]:
            raise InputError(f"holds {text}, which admits the transfer keys from {network.num_addresses} addresses; set "
                             f"it to the fleet's own networks (at most a /{MIN_PREFIX[network.version]}), such as "
                             "192.168.100.0/24")
    return list(value)


def _outside_the_system(text: str) -> bool:
    """TEXT is a plain absolute path, neither a system directory nor under one of the system's trees."""
    return _plain_path(text) and text not in SYSTEM_DIRS and not any(
        text == tree or text.startswith(tree + "/") for tree in SYSTEM_TREES)


def data_dir(value) -> str:
    """VALUE as a directory of model weights: a plain absolute path, not a system directory nor under one."""
    text = _text(value, "set it to a directory of weights such as /srv/dgxspark/models")
    if _outside_the_system(text):
        return text
    raise InputError(f"is {text!r:.120}, which is no directory for model weights (files in it are replaced and "
                     "removed); set it to a plain absolute path of its own, outside /etc, /usr, /proc, /sys, /dev, "
                     "/boot and /run and not a system directory itself, e.g. /srv/dgxspark/models")


def textfile_dir(value) -> str:
    """VALUE as the node exporter's textfile directory: a plain absolute path, not a system directory nor under one
    (the collection writes its own file there, dgxspark-watchdog.prom, and removes only that)."""
    text = _text(value, "set it to a directory such as /var/lib/prometheus/node-exporter")
    if _outside_the_system(text):
        return text
    raise InputError(f"is {text!r:.120}, which is no directory for the node exporter's textfile collector; set it to "
                     "a plain absolute path outside /etc, /usr, /proc, /sys, /dev, /boot and /run and not a system "
                     "directory itself, e.g. /var/lib/prometheus/node-exporter (Debian's and Ubuntu's textfile "
                     "directory)")


def logs(value) -> dict:
    """VALUE as the containers' log setting (a driver and its options, bounded): module_utils/_container_logs.py."""
    try:
        return container_logs(value)
    except LogsError as exc:
        raise InputError(str(exc)) from None


CHECKS = {IP: ip, SECRET_KIND: secret, HF_TOKEN_KIND: hf_token, NAME_KIND: name, IMAGE: image, MODEL: model, MODEL_OR_PATH: model_or_path,
          REVISION_KIND: revision, PULL_KIND: pull_policy,
          OWN_DIR: own_dir, OWN_FILE: own_file, DATA_DIR: data_dir, TEXTFILE_DIR: textfile_dir, BIND_KIND: bind, SOURCES_KIND: sources,
          LOGS_KIND: logs}


def check_value(host: str, variable: str, value, kind: str | None = None) -> str | None:
    """The problem with VARIABLE = VALUE on HOST, as a sentence naming both and the fix; None when it is fine.

    An unset or empty value is fine here (the roles require what they need), and so is one that cannot be read
    (Unreadable: a template that fails is left to the role that uses it)."""
    if value is None or value == "" or isinstance(value, Unreadable):
        return None
    try:
        CHECKS[kind or VARIABLES[variable]](value)
    except InputError as exc:
        return f"host {host}: {variable} {exc}"
    return None


def check_host(host: str, variables: dict) -> list[str]:
    """Every problem among VARIABLES (name to value, as the inventory or -e sets them for HOST) and HOST's name."""
    problems = []
    if not isinstance(host, str) or not NAME.fullmatch(host):
        problems.append(f"host {host!r:.80}: its inventory name must be letters, digits, '_', '.' and '-' (at most "
                        "63, starting with a letter or digit); rename it and set ansible_host to its address")
    for variable, kind in VARIABLES.items():
        if variable in variables:
            problem = check_value(host, variable, variables[variable], kind)
            if problem:
                problems.append(problem)
    return problems


class Unreadable:
    """A variable set for a host whose value cannot be read: its template names an undefined variable (UNDEFINED), or
    it is a vault value read without the vault's password. Neither its text nor the error's is kept."""

    __slots__ = ("undefined",)

    def __init__(self, undefined: str = ""):
        self.undefined = undefined

    def __repr__(self) -> str:
        return f"Unreadable({self.undefined!r})"


_UNDEFINED = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined")


def unreadable(error: BaseException) -> Unreadable:
    """What the failed read of a variable tells: only the name of the undefined variable, if the error gives one."""
    match = _UNDEFINED.search(str(error))
    return Unreadable(match.group(1) if match else "")


# The vault's names for the collection's variables (the example's vault_dgxspark_api_key and vault_dgxspark_hf_token):
# a vault value is used only through the variable a line of group_vars maps it to.
VAULT_PREFIX = "vault_"
VAULT_NAMES = {VAULT_PREFIX + variable: variable for variable in VARIABLES}
# The clients' key (the door's and the gateway's default client key) and the opt-out of one; the engine key
# (vllm_serve_api_key, made per cluster when unset), which must never be a client's.
API_KEY_VARIABLES = ("dgxspark_api_key",)
ENGINE_KEY_VARIABLE = "vllm_serve_api_key"
ALLOW_NO_API_KEY = "vllm_serve_allow_no_api_key"
# The engine's bind address, and the opt-in to a wildcard bind where gateways front the fleet.
BIND_VARIABLE = "vllm_serve_host"
ALLOW_WILDCARD = "vllm_serve_allow_wildcard_host"
# Every variable check_host, check_secrets and check_exposure read for a host.
READ = tuple(VARIABLES) + tuple(VAULT_NAMES) + (ALLOW_NO_API_KEY, ALLOW_WILDCARD)
_API_KEY_FIX = ("generate a key with `openssl rand -hex 32`, put it in group_vars/all/vault.yml as "
                "vault_dgxspark_api_key, map it in group_vars/all/main.yml with the line "
                "dgxspark_api_key: \"{{ vault_dgxspark_api_key }}\", encrypt the vault with `ansible-vault encrypt` "
                "and run the playbook with --ask-vault-pass; or, to serve without a key (anyone who reaches the port "
                "is served), set vllm_serve_allow_no_api_key: true")


def _mentions(value, name: str, depth: int = 0) -> bool:
    """Whether a string in VALUE (a raw, untemplated variable: strings, lists, dicts) names the variable NAME. Values
    of other types (a vault value still encrypted among them) are not read."""
    if isinstance(value, str):
        return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", value) is not None
    if depth < 4 and isinstance(value, (list, tuple)):
        return any(_mentions(item, name, depth + 1) for item in value)
    if depth < 4 and isinstance(value, dict):
        return any(_mentions(item, name, depth + 1) for item in value.values())
    return False


def _true(value) -> bool:
    return value is True or (isinstance(value, (str, int)) and not isinstance(value, bool)
                             and str(value).strip().lower() in ("true", "yes", "on", "1", "y"))


def check_secrets(host: str, variables: dict, raw=None, require_api_key: bool = False) -> list[str]:
    """The secrets' problems on HOST beyond their grammar, each naming host, variable and fix, never a value.

    VARIABLES: name to value of the names of READ that are set for HOST (an Unreadable where the value cannot be
    read). RAW: HOST's variables as written (templates unrendered), or a function
    returning them (called only when a vault value's own variable is unset), to see a vault value used under another
    name; None when unknown. REQUIRE_API_KEY: the playbook serves (deploy, rollout), so a key must be set unless
    vllm_serve_allow_no_api_key is true."""
    problems = []
    for vault_name, variable in VAULT_NAMES.items():
        value = variables.get(vault_name)
        if value is None or value == "" or variable in variables:
            continue
        if callable(raw):
            raw = raw()
        if raw is not None and any(_mentions(used, vault_name) for name, used in raw.items() if name != vault_name):
            continue
        problems.append(f"host {host}: {vault_name} is set (in the vault) but {variable} is not, so nothing uses it; "
                        f"add the line {variable}: \"{{{{ {vault_name} }}}}\" to group_vars/all/main.yml")
    engine_key, client_key = variables.get(ENGINE_KEY_VARIABLE), variables.get(API_KEY_VARIABLES[0])
    if isinstance(engine_key, str) and engine_key and engine_key == client_key:
        problems.append(f"host {host}: {ENGINE_KEY_VARIABLE} is the same key as {API_KEY_VARIABLES[0]}, so a client's "
                        "key is the engine's too (security review L7); remove the line that sets "
                        f"{ENGINE_KEY_VARIABLE} (each cluster then gets a key of its own, made on its head), or give "
                        "it a key no client has")
    if require_api_key and not _true(variables.get(ALLOW_NO_API_KEY)):
        variable = next((v for v in API_KEY_VARIABLES if v in variables), None)
        value = variables.get(variable) if variable else None
        if variable is None:
            said = f"{API_KEY_VARIABLES[0]} (the clients' key) is not set"
        elif isinstance(value, Unreadable):
            said = (f"{variable} cannot be read ({value.undefined} is undefined: is group_vars/all/vault.yml there, "
                    "made from vault.yml.example?)" if value.undefined else
                    f"{variable} cannot be read (a vault value without the vault's password, or a template that fails)")
        elif value is None or value == "":
            said = f"{variable} is empty"
        else:
            said = ""
        if said:
            problems.append(f"host {host}: no API key for the clients: {said}; {_API_KEY_FIX}")
    return problems


def check_exposure(host: str, variables: dict, gateways: bool) -> list[str]:
    """The engine's exposure on HOST: behind GATEWAYS (the fleet has a gateway group), an engine bound to every
    interface (0.0.0.0, ::) is reachable past them, on routes real vLLM serves without a key; it needs the explicit
    opt-in vllm_serve_allow_wildcard_host: true. The message names host, variable and fix."""
    value = variables.get(BIND_VARIABLE)
    if not gateways or not isinstance(value, str) or value not in ("0.0.0.0", "::") or _true(variables.get(ALLOW_WILDCARD)):
        return []
    return [f"host {host}: {BIND_VARIABLE} is {value}, so the engine listens on every interface, where clients reach it "
            f"past the fleet's gateways; leave {BIND_VARIABLE} unset (the engine binds 127.0.0.1 and the gateway "
            f"reaches it through the head's door), or, to expose it anyway, set {ALLOW_WILDCARD}: true"]


# The metrics key (GET /metrics at the heads' doors): the doors take the first of these their head sees, Prometheus
# sends the first of the others its monitoring host sees (the roles' defaults resolve the same way).
DOOR_METRICS_KEY = ("gateway_door_metrics_api_key", "monitoring_engine_api_key", "dgxspark_api_key")
PROMETHEUS_METRICS_KEY = ("monitoring_engine_api_key", "dgxspark_api_key")


def _first(values: dict, names: tuple):
    """(the variable, its value) of the first of NAMES set in VALUES; (None, None) when none is, or when the first
    set cannot be read (it is left to the role that uses it)."""
    for variable in names:
        if variable in values and values[variable] is not None:
            value = values[variable]
            return (None, None) if isinstance(value, Unreadable) else (variable, value)
    return None, None


def check_metrics_key(heads: dict, monitors: dict) -> list[str]:
    """Whether Prometheus on each monitoring host sends the metrics key each head's door admits. HEADS and MONITORS
    map a host to its variables (of DOOR_METRICS_KEY and PROMETHEUS_METRICS_KEY). A key set in the monitoring
    group's variables alone is the trap: the heads never see it, their doors admit another and every scrape of an
    engine is answered 401. The message names the hosts and the variables, never a key."""
    problems = []
    for monitor, mine in sorted(monitors.items()):
        sent_by, sent = _first(mine, PROMETHEUS_METRICS_KEY)
        if sent_by is None:
            continue
        for head, theirs in sorted(heads.items()):
            if head == monitor:
                continue  # Prometheus on the head itself reads the engine on the loopback, not through the door
            if str(theirs.get(BIND_VARIABLE) or "127.0.0.1") not in ("127.0.0.1", "::1"):
                continue  # an engine the operator put on the LAN has no door; its /metrics asks for no key
            admitted_by, admitted = _first(theirs, DOOR_METRICS_KEY)
            if admitted_by is None or str(admitted) == str(sent):
                continue
            problems.append(
                f"host {head}: its door admits the metrics key of {admitted_by}, but Prometheus on {monitor} sends "
                f"{sent_by}, another key, so every scrape of {head}'s engine would be refused (401); set "
                f"monitoring_engine_api_key where both see it (group_vars/all, or the vault), not in one group's "
                f"variables alone")
    return problems


# What a node reports about its own fabric (dgxspark.vllm.rdma_facts) is checked as strictly as the inventory: it
# goes into authorized_keys' from=, known_hosts, ping's argv and the engines' environment.
IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_fabric(host: str, fabric: dict) -> list[str]:
    """The problems in the fabric HOST published (node_fabric's shape), naming HOST and the fix."""
    problems = []
    fix = ("check the node's fabric and LAN interfaces (ip -br addr), or set dgxspark_fabric_interface to the right "
           "port")
    for key, what in (("ip", "fabric IP"), ("lan_ip", "LAN IP")):
        value = fabric.get(key) or ""
        if value:
            try:
                ip(value)
            except InputError:
                problems.append(f"host {host}: the {what} it reported (dgxspark_node.fabric.{key}) is {value!r:.80}, "
                                f"not an IP address; {fix}")
    for key in ("interface", "lan_interface"):
        value = fabric.get(key) or ""
        if value and not IFNAME.fullmatch(value):
            problems.append(f"host {host}: the interface it reported (dgxspark_node.fabric.{key}) is {value!r:.80}, "
                            f"not an interface name; {fix}")
    for key, value in (fabric.get("env") or {}).items():
        if not ENV_NAME.fullmatch(key) or any(ord(c) < 32 or ord(c) == 127 for c in value) or '"' in value \
                or "'" in value or "\\" in value:
            problems.append(f"host {host}: the environment it reported (dgxspark_node.fabric.env) has {key!r:.60}="
                            f"{value!r:.80}, which is no variable name or has a newline, quote or backslash; {fix}")
    return problems
