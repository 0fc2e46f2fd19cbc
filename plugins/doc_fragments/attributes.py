# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared wording for the ``attributes`` section of the collection's modules."""

from __future__ import annotations


class ModuleDocFragment:
    # Each module states its own support level; this fragment only supplies the
    # descriptions, so that every module explains the attributes the same way.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and report what would change without changing the target.
  diff_mode:
    description: Returns details on what has changed, or would change in check mode, when run with C(--diff).
  idempotent:
    description:
      - When run twice in a row with the same arguments, the second run reports no change.
  platform:
    description: Target operating systems this module runs on.
    platforms: posix
"""

    # The support levels of a module that only reads (the info and facts modules):
    # extends_documentation_fragment: [dgxspark.vllm.attributes, dgxspark.vllm.attributes.read_only]
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
"""
