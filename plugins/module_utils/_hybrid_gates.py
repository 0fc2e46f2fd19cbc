# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdicts of the hybrid_image role's three verification gates, from what the gate containers printed.

Gate (a) runs ``pip check`` in the candidate image, gate (b) loads each architecture's model class through vLLM's
registry (``inspect_architectures.py``, whose last ``DGXSPARK_INSPECT <json>`` line carries one result per
architecture; with the GPU asked for, as the engine containers ask, on a node that has one: ``gate_gpu_args``),
gate (c) runs the image's own entrypoint and reads its ENTRYPOINT and Ray. Each judge takes the
command's result (``rc``, ``stdout``, ``stderr``) and returns the gate's record: ``gate`` (its letter), ``passed``,
``reason`` and what the gate saw. Pure functions of their arguments (stdlib plus ansible's LooseVersion).
"""

from __future__ import annotations

import json
import re

from ansible.module_utils.compat.version import LooseVersion

NO_CONFLICTS = re.compile(r"^No broken requirements found")
CONFLICT_REQUIREMENT = re.compile(r"^.* has requirement (.+), but you have .*$")
INSPECT_MARKER = "DGXSPARK_INSPECT "
LAUNCHER_ENTRYPOINT = ["python3", "/opt/dgxspark/bin/dgxspark-launch"]


def truncate(text: str, length: int, end: str = "...", leeway: int = 5) -> str:
    """TEXT cut to about LENGTH characters at a word boundary, as Jinja's ``truncate`` filter cuts it."""
    if len(text) <= length + leeway:
        return text
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


def _text(result: dict, key: str) -> str:
    value = result.get(key)
    return "" if value is None else str(value)


def _lines(result: dict) -> list[str]:
    lines = result.get("stdout_lines")
    return [str(line) for line in lines] if lines is not None else _text(result, "stdout").splitlines()


def _output(result: dict, first: str, second: str, length: int) -> str:
    return truncate(f"{_text(result, first)} {_text(result, second)}".strip(), length)


def conflict_requirement(line: str) -> str:
    """The requirement a ``pip check`` line names ('x 1 has requirement y<2, but you have y 3' -> 'y<2')."""
    return CONFLICT_REQUIREMENT.sub(r"\1", line)


def _conflict_lines(result: dict) -> list[str]:
    lines = [line.strip() for line in _lines(result)]
    return [line for line in lines if line and not NO_CONFLICTS.match(line)]


def baseline_conflicts(baseline: dict | None) -> tuple[list[str], str]:
    """The conflict lines ``pip check`` printed in the image the build starts from (its own, before the build added
    anything), and why there are none to go by when it could not run ('' when it ran)."""
    if not baseline:
        return [], "no baseline"
    rc = baseline.get("rc")
    lines = _conflict_lines(baseline)
    if rc == 0 or (rc == 1 and lines):
        return lines, ""
    return [], f"pip check could not run in the source (exit {rc}): {_output(baseline, 'stderr', 'stdout', 300)}"


def pip_check_gate(result: dict, accept_conflicts: list[str], baseline: dict | None = None) -> dict:
    """Gate (a): ``pip check`` passes with exit 0, or exit 1 when every conflict line is either the image's own
    (BASELINE: ``pip check`` in the image the build starts from printed the same line) or in ACCEPT_CONFLICTS. The
    gate judges what the build added, not what the source already had: an image the field serves with conflicts of
    its own is not refused for them."""
    rc = result.get("rc")
    lines = _conflict_lines(result)
    inherited_lines, baseline_error = baseline_conflicts(baseline)
    accepted_lines = [str(line).strip() for line in accept_conflicts]
    inherited = [line for line in dict.fromkeys(lines) if line in inherited_lines]
    unaccepted = [line for line in lines if line not in accepted_lines and line not in inherited_lines]
    accepted = []
    for line in lines:
        if line not in unaccepted and line not in inherited and line not in accepted:
            accepted.append(line)
    requirements = [conflict_requirement(line) for line in unaccepted]
    if rc not in (0, 1) or (rc == 1 and not lines):
        reason = f"pip check could not run (exit {rc}): {_output(result, 'stderr', 'stdout', 800)}"
    else:
        reason = (f"{len(unaccepted)} conflict(s) not accepted: {' | '.join(unaccepted)}"
                  f" (conflicting requirement(s): {', '.join(requirements)}); to ship it anyway,"
                  " list the exact line in hybrid_image_accept_conflicts")
        if inherited:
            reason += f"; {len(inherited)} the source image already had, not counted: {' | '.join(inherited)}"
    return {
        "gate": "a",
        "passed": rc == 0 or (rc == 1 and bool(lines) and not unaccepted),
        "conflicts": lines,
        "accepted": accepted,
        "inherited": inherited,
        "baseline_error": baseline_error if baseline else "",
        "requirements": requirements,
        "reason": reason,
    }


def inspection_results(result: dict) -> list[dict]:
    """The per-architecture results of the last DGXSPARK_INSPECT line of stdout ([] when there is none)."""
    marked = [line for line in _lines(result) if line.startswith(INSPECT_MARKER)]
    if not marked:
        return []
    try:
        results = json.loads(marked[-1][len(INSPECT_MARKER):])
    except ValueError:
        results = None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ValueError(f"the inspection printed {marked[-1][:200]!r}: a DGXSPARK_INSPECT line holds a JSON list"
                         " of objects")
    return results


def inspection_gate(result: dict) -> dict:
    """Gate (b): every architecture's model class loaded (exit 0 and a result for each, none failed)."""
    rc = result.get("rc")
    results = inspection_results(result)
    failed = [r for r in results if not r.get("ok")]
    if not results:
        reason = f"the inspection did not run (exit {rc}): {_output(result, 'stderr', 'stdout', 1500)}"
    else:
        failures = "; ".join(
            f"{r.get('architecture') or 'the registry'} ({r.get('module')}{('.' + str(r['class'])) if r.get('class') else ''}):"
            f" {r.get('error')}" for r in failed)
        reason = f"{failures} - vLLM would stop with \"Model architectures [...] failed to be inspected\""
    return {
        "gate": "b",
        "passed": rc == 0 and bool(results) and not failed,
        "architectures": [{k: v for k, v in r.items() if k != "traceback"} for r in results],
        "reason": reason,
    }


GPU_MODES = ("auto", "always", "never")
# The engine containers ask for the GPU as `--gpus all` does (device_requests, driver nvidia, count -1): so does the
# model-import gate where the GPU is to be had.
GPU_RUN_ARGS = ["--gpus", "all"]
NVIDIA_SMI_GPU = re.compile(r"^GPU [0-9]+: ", re.MULTILINE)


def node_gpus(probe: dict | None) -> int:
    """How many GPUs ``nvidia-smi -L`` on the node listed (0 when it failed or did not run)."""
    if not probe or probe.get("rc") != 0 or probe.get("skipped"):
        return 0
    return len(NVIDIA_SMI_GPU.findall(_text(probe, "stdout")))


def gate_gpu_args(mode: str, probe: dict | None, run_args: list | None = None) -> list[str]:
    """The `docker run` arguments that give the model-import gate (b) the GPU, as the engine containers are given it:
    MODE ``always`` asks for it, ``never`` does not, ``auto`` asks on a node whose ``nvidia-smi -L`` (PROBE) listed a
    GPU. None when RUN_ARGS (the gates' extra arguments) already ask for one. Raises ValueError for another MODE."""
    if mode not in GPU_MODES:
        raise ValueError(f"hybrid_image_gate_gpus is {mode!r}: it must be one of {', '.join(GPU_MODES)}")
    if any(str(arg) == "--gpus" or str(arg).startswith("--gpus=") for arg in run_args or []):
        return []
    if mode == "always" or (mode == "auto" and node_gpus(probe) > 0):
        return list(GPU_RUN_ARGS)
    return []


def _ray_at_least(version: str | None, minimum: str) -> bool:
    return LooseVersion(str(version or "0")) >= LooseVersion(str(minimum))


def entrypoint_gate(result: dict, image: dict, launcher_version: str, ray_install: str, ray_added: str,
                    ray_version: str, min_ray_version: str) -> dict:
    """Gate (c): `docker run <image> version` prints the launcher's version, the ENTRYPOINT is the launcher, and
    the image has the Ray the launcher needs (RAY_ADDED: the requirement the build installed, '' for none)."""
    rc = result.get("rc")
    stdout = _text(result, "stdout")
    entrypoint = image.get("entrypoint")
    ray = (image.get("versions") or {}).get("ray")
    launcher_ok = rc == 0 and stdout.strip() == launcher_version
    entrypoint_ok = entrypoint == LAUNCHER_ENTRYPOINT
    ray_ok = ray_install == "never" or bool(
        image.get("ray_present")
        and ((ray_added and ray == ray_version) or (not ray_added and _ray_at_least(ray, min_ray_version))))
    problems = []
    if not launcher_ok:
        printed = json.dumps(_output(result, "stdout", "stderr", 400))
        problems.append(f"`docker run <image> version` exited {rc} printing {printed}, not the launcher version"
                        f" {launcher_version}")
    if not entrypoint_ok:
        problems.append(f"the ENTRYPOINT is {json.dumps(entrypoint)}, not the launcher")
    if not ray_ok:
        needed = ray_version if ray_added else f">= {min_ray_version}"
        problems.append(f"the launcher needs Ray {needed} but the image has {ray or 'none'}")
    return {
        "gate": "c",
        "passed": launcher_ok and entrypoint_ok and ray_ok,
        "output": truncate(stdout.strip(), 200),
        "entrypoint": entrypoint,
        "ray": ray,
        "reason": "; ".join(problems),
    }


def judge(pip_check: dict, inspection: dict, entrypoint: dict, image: dict, accept_conflicts: list[str],
          launcher_version: str, ray_install: str, ray_added: str, ray_version: str, min_ray_version: str,
          baseline: dict | None = None) -> dict:
    """The three gates' records, keyed pip_check, inspection and entrypoint (in that order). BASELINE is
    ``pip check`` in the image the build starts from (gate (a) does not count its conflicts)."""
    return {
        "pip_check": pip_check_gate(pip_check, accept_conflicts, baseline),
        "inspection": inspection_gate(inspection),
        "entrypoint": entrypoint_gate(entrypoint, image, launcher_version, ray_install, ray_added, ray_version,
                                      min_ray_version),
    }
