# SPDX-License-Identifier: Apache-2.0
"""vLLM: a high-throughput and memory-efficient inference engine for LLMs.

This is the dgxspark.vllm lab's GPU-free stand-in: same CLI, registry, OpenAI
endpoints, Ray / multi-node bring-up and failure modes; the "model" is a
deterministic function of the prompt and of every tensor-parallel rank's shard.
"""

from vllm.version import __version__, __version_tuple__

__all__ = ["__version__", "__version_tuple__"]
