"""Offline stand-in for ansible-test's get-pip bootstrap script.

dgxspark.vllm sanity harness (tools/sanity.sh) installs this file as
~/.ansible/test/cache/get_pip_<pip version>.py, because ansible-test cannot
download the real get-pip script on this network.

ansible-test runs it (through its quiet_pip wrapper) inside a fresh venv created
with --without-pip, passing pip install arguments such as
``--disable-pip-version-check pip==24.2 --no-setuptools --no-wheel``.

1. ``python -m ensurepip`` installs the interpreter's bundled pip (in a child
   process, so that ensurepip's environment changes stay out of ours).
2. ensurepip sets PIP_CONFIG_FILE=/dev/null for the pip it starts; the variable
   is removed here in case a parent ever leaked it, because it would hide the
   machine-wide pip configuration that carries the CA bundle of the
   TLS-intercepting proxy in front of PyPI.
3. ``python -m pip install`` with the given arguments, minus the get-pip only
   options --no-setuptools / --no-wheel.
4. If --no-setuptools was requested, setuptools that ensurepip brings along on
   Python < 3.12 is removed again, so the venv matches what ansible-test expects.
"""

from __future__ import annotations

import os
import subprocess
import sys

MARKER = 'dgxspark.vllm get-pip shim'
GET_PIP_ONLY = ('--no-setuptools', '--no-wheel')


def run(cmd: list[str], env: dict[str, str]) -> None:
    """Run a command, exiting with its status if it fails."""
    result = subprocess.run(cmd, env=env, check=False)

    if result.returncode:
        sys.exit(result.returncode)


def main() -> None:
    """Bootstrap pip into the running interpreter's environment."""
    args = sys.argv[1:]
    env = dict(os.environ)
    env.pop('PIP_CONFIG_FILE', None)
    os.environ.pop('PIP_CONFIG_FILE', None)

    run([sys.executable, '-m', 'ensurepip', '--default-pip'], env)

    env.pop('PIP_CONFIG_FILE', None)
    # locks: exempt (ansible-test's own bootstrap: the exact pip==X it pins for its sanity venvs)
    run([sys.executable, '-m', 'pip', 'install'] + [arg for arg in args if arg not in GET_PIP_ONLY], env)

    if '--no-setuptools' in args:
        check = subprocess.run([sys.executable, '-m', 'pip', 'show', '-q', 'setuptools'],
                               env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        if check.returncode == 0:
            run([sys.executable, '-m', 'pip', 'uninstall', '-q', '-y', '--disable-pip-version-check', 'setuptools'], env)


if __name__ == '__main__':
    main()
