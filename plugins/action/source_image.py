# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.source_image: the image the deploy starts from, pulled under the node's policy with
community.docker and recorded by ID and digest, in one step (see the module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._image_pull import PullError, check, pulled
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import variable_names

# The real component does the pulling and the looking: community.docker's modules, run on the node.
PULL = "community.docker.docker_image_pull"
INFO = "community.docker.docker_image_info"


def pull_failure(host, reference, policy, answer):
    return (f"{host}: could not pull {reference} (dgxspark_image, dgxspark_image_pull={policy}): "
            f"{answer.get('msg') or 'no message'}. Check the reference, that this node reaches its registry, trusts "
            "its certificate (/etc/docker/certs.d/<registry>/ca.crt for a private CA) and is logged in to it when it "
            "needs a login (docker login on the node); or put the image on the node and set dgxspark_image_pull: "
            "never.")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # community.docker's modules run in check mode as they are: a pull that would happen is reported, nothing pulled.
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "image": {"type": "str", "required": True},
            "policy": {"type": "str", "default": "missing"},
            "docker_host": {"type": "str"},
            "publish": {"type": "str"},
        })
        host = task_vars.get("inventory_hostname", "this host")
        reference, policy = args["image"], args["policy"]
        variable_names(f"{host}: source_image", args, ("publish",))
        try:
            check(reference, policy, host)  # before anything runs on the node
        except PullError as exc:
            raise AnsibleActionFail(str(exc)) from None
        connection = {"docker_host": args["docker_host"]} if args["docker_host"] else {}
        if policy == "never":
            answer = self._execute_module(module_name=INFO, module_args={"name": reference, **connection},
                                          task_vars=task_vars)
            if answer.get("failed"):
                raise AnsibleActionFail(f"{host}: could not look for {reference} (dgxspark_image): "
                                        f"{answer.get('msg') or 'no message'}")
            image, changed = (answer.get("images") or [{}])[0], False
        else:
            answer = self._execute_module(module_name=PULL, module_args={
                "name": reference, "pull": "always" if policy == "always" else "not_present", **connection},
                task_vars=task_vars)
            if answer.get("failed"):
                raise AnsibleActionFail(pull_failure(host, reference, policy, answer))
            image, changed = answer.get("image") or {}, bool(answer.get("changed"))
        try:
            record = pulled(image, reference, policy=policy, changed=changed, host=host)
        except PullError as exc:
            raise AnsibleActionFail(str(exc)) from None
        result.update(changed=changed, image=record)
        if args["publish"]:
            result["ansible_facts"] = {args["publish"]: record}
        return result
