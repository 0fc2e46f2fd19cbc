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
