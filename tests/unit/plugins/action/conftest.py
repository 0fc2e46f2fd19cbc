# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the action plugins' tests share: an action of a plugin, run on given arguments, whose module calls answer a
given result."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.playbook.task import Task


@pytest.fixture
def run_action():
    """run_action(plugin, args, task_vars, answer) -> (the action, its result); each module call answers ANSWER."""

    def run(plugin, args, task_vars, answer):
        task = Task()
        task.args = args
        connection = MagicMock()
        connection._shell.tmpdir = None
        action = plugin.ActionModule(task, connection, MagicMock(check_mode=False), loader=None, templar=None,
                                     shared_loader_obj=None)
        action._execute_module = MagicMock(return_value=answer)
        return action, action.run(task_vars=task_vars)

    return run
