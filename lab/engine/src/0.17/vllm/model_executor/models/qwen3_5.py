# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 and Qwen3.5-MoE: hybrid Gated DeltaNet / gated attention, natively multimodal.

Lab stand-in with the module layout of vLLM 0.17: it builds on Qwen3-Next (text
tower) and Qwen3-VL (vision tower) and needs the mamba state-copy helpers that
were added to ``mamba_utils`` after 0.14, so copying this file into a 0.14 tree
fails to import, as the field's graft did.
"""

from vllm.logger import init_logger
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFunc,
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.transformers_utils.configs.qwen3_5 import (
    Qwen3_5Config,
    Qwen3_5TextConfig,
)
from vllm.transformers_utils.configs.qwen3_5_moe import (
    Qwen3_5MoeConfig,
    Qwen3_5MoeTextConfig,
)

from .interfaces import (
    HasInnerState,
    IsHybrid,
    MixtureOfExperts,
    SupportsLoRA,
    SupportsPP,
    _require_is_multimodal,
)
from .qwen2_moe import Qwen2MoeMLP as Qwen3NextMLP
from .qwen3_next import (
    Qwen3NextAttention,
    Qwen3NextDecoderLayer,
    Qwen3NextGatedDeltaNet,
    Qwen3NextModel,
    Qwen3NextSparseMoeBlock,
    QwenNextMixtureOfExperts,
)
from .qwen3_vl import (
    Qwen3_VisionTransformer,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessingInfo,
)
from .utils import maybe_prefix

logger = init_logger(__name__)


class Qwen3_5ProcessingInfo(Qwen3VLProcessingInfo):
    def get_hf_config(self):
        return Qwen3_5Config


class Qwen3_5MoeProcessingInfo(Qwen3VLProcessingInfo):
    def get_hf_config(self):
        return Qwen3_5MoeConfig


class Qwen3_5GatedDeltaNet(Qwen3NextGatedDeltaNet):
    pass


class Qwen3_5DecoderLayer(Qwen3NextDecoderLayer):
    def __init__(self, vllm_config=None, layer_type: str = "full_attention", prefix: str = "") -> None:
        super().__init__(vllm_config, layer_type, prefix)
        self.linear_attn = Qwen3_5GatedDeltaNet(prefix=maybe_prefix(prefix, "linear_attn")) \
            if layer_type == "linear_attention" else None
        self.self_attn = Qwen3NextAttention(prefix=maybe_prefix(prefix, "self_attn")) \
            if layer_type == "full_attention" else None
        self.mlp = Qwen3NextSparseMoeBlock(prefix=maybe_prefix(prefix, "mlp"))


class Qwen3_5Model(Qwen3NextModel):
    text_config_class = Qwen3_5TextConfig


class Qwen3_5MoeModel(Qwen3NextModel):
    text_config_class = Qwen3_5MoeTextConfig


class Qwen3_5ForConditionalGeneration(Qwen3VLForConditionalGeneration, HasInnerState, IsHybrid,
                                      SupportsLoRA, SupportsPP):
    hf_config_class = Qwen3_5Config
    shared_mlp_class = Qwen3NextMLP

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        return MambaStateDtypeCalculator.gated_delta_net_state_dtype("auto", "auto")

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        return MambaStateShapeCalculator.gated_delta_net_state_shape(1, 16, 32, 128, 128, 4)

    @classmethod
    def get_mamba_state_copy_func(cls) -> tuple:
        copy_funcs: tuple = MambaStateCopyFuncCalculator.gated_delta_net_state_copy_func()
        assert MambaStateCopyFunc
        return copy_funcs

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, *, is_multimodal=None):
        if multimodal_embeddings is not None:
            _require_is_multimodal(is_multimodal)
        return input_ids


class Qwen3_5_MoeMixtureOfExperts(MixtureOfExperts):
    def set_moe_parameters(self) -> None:
        self.num_logical_experts = 256
        self.num_routed_experts = 256


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration, Qwen3_5_MoeMixtureOfExperts,
                                         QwenNextMixtureOfExperts):
    hf_config_class = Qwen3_5MoeConfig


__all__ = [
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_VisionTransformer",
]
