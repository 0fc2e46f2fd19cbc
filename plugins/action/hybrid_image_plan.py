# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.hybrid_image_plan: the hybrid_image role's inputs checked, the images it starts from
read on the build host, and the content tag of the image they make, in one step (see the module's documentation)."""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils import _hybrid_plan, _node_program

OPTIONS = {
    "strategy": {"type": "str", "default": "overlay"},
    "source": {"type": "str", "required": True},
    "base": {"type": "str", "default": ""},
    "pull": {"type": "bool", "default": False},
    "repository": {"type": "str", "required": True},
    "tag": {"type": "str", "default": ""},
    "graft_files": {"type": "list", "elements": "str", "default": []},
    "registry_entries": {"type": "list", "elements": "raw", "default": []},
    "config_entries": {"type": "list", "elements": "raw", "default": []},
    "pip_install": {"type": "list", "elements": "str", "default": []},
    "pip_cert": {"type": "str", "default": ""},
    "pip_wheelhouse": {"type": "str", "default": ""},
    "ray_install": {"type": "str", "default": "auto"},
    "ray_version": {"type": "str", "required": True},
    "min_ray_version": {"type": "raw", "required": True},
    "ray_extras": {"type": "list", "elements": "str", "default": []},
    "ray_lock": {"type": "str", "required": True},
    "launcher": {"type": "str", "default": ""},
    "architectures": {"type": "list", "elements": "str", "required": True},
    "model_dir": {"type": "str", "default": ""},
    "accept_conflicts": {"type": "raw", "default": []},
    "verify": {"type": "bool", "default": True},
    "record": {"type": "str", "required": True},
    "recipe": {"type": "str", "required": True},
}
INFO = "dgxspark.vllm.vllm_image_info"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # The reads on the build host are check-mode safe; the pull (pull: true) is community.docker's, which reports
    # what it would pull in check mode.
    _supports_check_mode = True

    def _module(self, name, args, task_vars, what):
        answer = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        if answer.get("failed"):
            raise AnsibleActionFail(f"{self._host}: {what}: {answer.get('msg', answer)}")
        return answer

    def _controller_text(self, path: str, what: str) -> str | None:
        """The text of PATH on the controller (searched as the file lookup searches: the role's files/, then the
        playbook's), None when it is no file there."""
        try:
            found = self._find_needle("files", path)
        except AnsibleError:
            return None
        if not os.path.isfile(found):
            return None
        try:
            with open(found, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise AnsibleActionFail(f"{self._host}: {what} {path} cannot be read on the controller: {exc}") from None

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec=OPTIONS)
        self._host = host = str(task_vars.get("inventory_hostname") or "this host")
        given = dict(args)
        # Every input first, before anything reaches the build host.
        problems = _hybrid_plan.input_problems(host, given)
        if problems:
            raise AnsibleActionFail(" | ".join(problems))
        if args["launcher"]:
            launcher = self._controller_text(args["launcher"], "hybrid_image_launcher")
            if launcher is None:
                raise AnsibleActionFail(f"{host}: hybrid_image_launcher {args['launcher']} is not a file on the "
                                        "controller: leave it empty for the collection's dgxspark-launch")
        else:
            try:
                launcher = _node_program.build("dgxspark-launch")
            except _node_program.BuildError as exc:
                raise AnsibleActionFail(f"{host}: dgxspark-launch: {exc}") from None
        recipe = self._controller_text(args["recipe"], "the recipe")
        if recipe is None:
            raise AnsibleActionFail(f"{host}: the recipe {args['recipe']} is not a file on the controller")
        try:
            version = _hybrid_plan.launcher_version(launcher, args["launcher"] or "dgxspark-launch")
        except _hybrid_plan.PlanError as exc:
            raise AnsibleActionFail(str(exc)) from None
        graft = args["strategy"] == "graft"
        images = [args["source"]] + ([args["base"]] if graft else [])
        pulled = []
        if args["pull"]:
            for image in images:
                answer = self._module("community.docker.docker_image_pull", {"name": image, "pull": "not_present"},
                                      task_vars, f"pulling {image}")
                if answer.get("changed"):
                    pulled.append(image)
        # The gates check the architectures the model declares (its config.json on the build host, read in this
        # call), hybrid_image_architectures when it declares none.
        source_args = {"image": args["source"], "architectures": args["architectures"]}
        if args["model_dir"]:
            source_args["model_config"] = f"{args['model_dir'].rstrip('/')}/config.json"
        source = self._module(INFO, source_args, task_vars, f"inspecting the source image {args['source']}")
        architectures = list(source.get("checked_architectures") or [])
        base = (self._module(INFO, {"image": args["base"], "architectures": architectures}, task_vars,
                             f"inspecting the base image {args['base']}") if graft else {})
        wheelhouse = []
        if args["pip_wheelhouse"]:
            found = self._execute_module(module_name="ansible.builtin.find", task_vars=task_vars, module_args={
                "paths": args["pip_wheelhouse"], "file_type": "file"})
            wheelhouse = sorted(os.path.basename(f["path"]) for f in found.get("files") or [])
            if not wheelhouse:
                reason = f": {found['msg']}" if found.get("msg") else ""
                raise AnsibleActionFail(
                    f"{host}: the wheelhouse {args['pip_wheelhouse']} (hybrid_image_pip_wheelhouse, a directory on the "
                    f"build host) holds no files{reason}. Fill it with `pip download -d DIR REQUIREMENT...` for the "
                    "image's Python and architecture.")
        start, start_info = (args["base"], base) if graft else (args["source"], source)
        if start_info.get("python") is None or not start_info.get("site_packages") or (
                graft and not source.get("site_packages")):
            why = (f"{start} has no python3 on its PATH" if start_info.get("python") is None else
                   f"{start} has no vLLM in any site-packages" if not start_info.get("site_packages") else
                   f"the source {args['source']} has no vLLM to take files from")
            raise AnsibleActionFail(f"{host}: {why}: it cannot become a vLLM serving image")
        lock_text = self._controller_text(args["ray_lock"], "hybrid_image_ray_lock")
        ray = _hybrid_plan.ray_plan(given, start_info, lock_text, args["ray_lock"])
        if ray["problems"]:
            raise AnsibleActionFail(
                f"{host}: the image needs Ray {args['ray_version']} (hybrid_image_ray_install="
                f"{args['ray_install']}), installed only from a hashed lock (hybrid_image_ray_lock): "
                f"{'; '.join(ray['problems'])}. The collection ships the lock of Ray 2.54.1 with the extras [default]; "
                "for another version or extras, set hybrid_image_ray_lock to a lock of it made with "
                "`uv pip compile --universal --generate-hashes` (every package pinned with == and hashed).")
        made_of = _hybrid_plan.inputs(
            given, recipe_sha256=hashlib.sha256(recipe.encode()).hexdigest(), source_id=str(source.get("id") or ""),
            base_id=str(base.get("id") or ""), ray=ray, wheelhouse=wheelhouse,
            launcher_sha256=hashlib.sha256(launcher.encode()).hexdigest(), launcher=version,
            architectures=architectures)
        digest, tag = _hybrid_plan.content_tag(args["repository"], args["strategy"], args["verify"], made_of)
        # One read finds the verified image of these inputs and, when it is there, inspects it. A tag is no proof:
        # the image counts as verified only when its ID is the one recorded after the gates passed on this node.
        existing = self._module(INFO, {"image": tag, "architectures": architectures, "missing": "report",
                                       "record": args["record"]}, task_vars, f"looking for {tag}")
        reuse = bool(existing.get("exists")) and existing.get("id") == existing.get("recorded_id")
        facts = {
            "hybrid_image_source_info": source, "hybrid_image_base_info": base,
            "hybrid_image_gate_architectures": architectures, "hybrid_image_from": start,
            "hybrid_image_from_info": start_info, "hybrid_image_launcher_text": launcher,
            "hybrid_image_launcher_version": version,
            "hybrid_image_ray_added": ray["spec"] if ray["add"] else "",
            "hybrid_image_ray_lock_content": ray["lock_text"],
            "hybrid_image_pip_requirements": ray["requirements"],
            "hybrid_image_base_site": (start_info.get("site_packages") or [""])[0],
            "hybrid_image_source_site": (source.get("site_packages") or [""])[0],
            "hybrid_image_inputs": made_of, "hybrid_image_inputs_sha256": digest, "hybrid_image_content_tag": tag,
            "hybrid_image_existing": existing, "hybrid_image_reuse": reuse,
        }
        result.update(changed=bool(pulled), pulled=pulled, image=tag, inputs_sha256=digest, reuse=reuse,
                      exists=bool(existing.get("exists")), id=existing.get("id") or "",
                      recorded_id=existing.get("recorded_id") or "", ansible_facts=facts)
        return result
