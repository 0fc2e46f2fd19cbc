# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's action plugins share on the controller: the check of an option that names a variable (a fact
to publish, a registered result to read), before the action reads or publishes anything."""

from __future__ import annotations

import re

from ansible.errors import AnsibleActionFail

VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def variable_names(action: str, args: dict, options, *, dotted=()) -> None:
    """Fail naming ACTION, the option and its value when an option of OPTIONS (set in ARGS) is not a variable name;
    the options in DOTTED may name a path in one (``facts.spec``)."""
    for option in options:
        value = args.get(option)
        if value is None:
            continue
        if not (DOTTED if option in dotted else VARIABLE).match(str(value)):
            raise AnsibleActionFail(f"{action}: {option} is {value!r}: give a variable name")


def fleet(action: str, task_vars: dict) -> dict:
    """The fleet M(dgxspark.vllm.fleet) published in the play (``dgxspark_fleet``); fails naming ACTION and the step to
    run first when there is none."""
    found = task_vars.get("dgxspark_fleet")
    if not isinstance(found, dict) or not isinstance(found.get("clusters"), dict):
        raise AnsibleActionFail(f"{action}: no dgxspark_fleet: run dgxspark.vllm.fleet first in the play")
    return found


def published(action: str, hostvars, host: str, name: str):
    """HOST's variable NAME as the play holds it (what it published or registered); None when HOST or NAME is not there.
    A variable whose template fails fails naming ACTION, the host and the variable."""
    try:
        return hostvars[host].get(name) if host in hostvars else None
    except Exception as exc:  # pylint: disable=broad-except  # lazy hostvars: a template error in a variable
        raise AnsibleActionFail(f"{action}: cannot read {host}'s {name}: {exc}") from exc
