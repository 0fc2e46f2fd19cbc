# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 (dense) model configuration: a text config, a vision config, and the wrapper."""

from vllm.transformers_utils.configs._base import PretrainedConfig


class Qwen3_5TextConfig(PretrainedConfig):
    model_type = "qwen3_5_text"
    base_config_key = "text_config"

    def __init__(self, vocab_size=248320, hidden_size=4096, num_hidden_layers=32, num_attention_heads=16,
                 num_key_value_heads=4, head_dim=256, max_position_embeddings=262144, layer_types=None,
                 full_attention_interval=4, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                 linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                 mtp_num_hidden_layers=1, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.full_attention_interval = full_attention_interval
        self.layer_types = layer_types or [
            "full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
            for i in range(num_hidden_layers)]
        self.linear_conv_kernel_dim = linear_conv_kernel_dim
        self.linear_key_head_dim = linear_key_head_dim
        self.linear_value_head_dim = linear_value_head_dim
        self.linear_num_key_heads = linear_num_key_heads
        self.linear_num_value_heads = linear_num_value_heads
        self.mtp_num_hidden_layers = mtp_num_hidden_layers
        super().__init__(**kwargs)


class Qwen3_5VisionConfig(PretrainedConfig):
    model_type = "qwen3_5"
    base_config_key = "vision_config"

    def __init__(self, depth=27, hidden_size=1152, num_heads=16, patch_size=16, out_hidden_size=4096,
                 **kwargs):
        self.depth = depth
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.patch_size = patch_size
        self.out_hidden_size = out_hidden_size
        super().__init__(**kwargs)


class Qwen3_5Config(PretrainedConfig):
    model_type = "qwen3_5"
    sub_configs = {"vision_config": Qwen3_5VisionConfig, "text_config": Qwen3_5TextConfig}

    def __init__(self, text_config=None, vision_config=None, image_token_id=248056, video_token_id=248057,
                 vision_start_token_id=248053, vision_end_token_id=248054, tie_word_embeddings=False,
                 **kwargs):
        if isinstance(vision_config, dict):
            self.vision_config = self.sub_configs["vision_config"](**vision_config)
        elif vision_config is None:
            self.vision_config = self.sub_configs["vision_config"]()
        else:
            self.vision_config = vision_config
        if isinstance(text_config, dict):
            self.text_config = self.sub_configs["text_config"](**text_config)
        elif text_config is None:
            self.text_config = self.sub_configs["text_config"]()
        else:
            self.text_config = text_config
        self.image_token_id = image_token_id
        self.video_token_id = video_token_id
        self.vision_start_token_id = vision_start_token_id
        self.vision_end_token_id = vision_end_token_id
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


__all__ = ["Qwen3_5Config", "Qwen3_5TextConfig"]
