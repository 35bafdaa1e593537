"""Weight converters between HuggingFace and maskplay, by the names they have always been imported under. The
converters are maskplay.families.hf (one per family: bert, electra, gpt, xlnet, and the registry from_hf / to_hf
look them up in); the fine-tuned sequence classifiers are maskplay.finetune_convert. See docs/CONVERT.md."""

from .families.hf import (
    ARCHITECTURES,
    SEQUENCE_ARCHITECTURES,
    HFCheckpoint,
    from_hf,
    hf_config_dict,
    hf_electra_config,
    to_hf,
)
from .families.hf.bert import config_from_hf_bert, hf_bert_to_maskplay, maskplay_to_hf_bert
from .families.hf.electra import (
    config_from_hf_electra,
    hf_electra_discriminator_to_maskplay,
    hf_electra_embeddings_equal,
    hf_electra_generator_to_maskplay,
    hf_electra_pair_to_maskplay,
    maskplay_to_hf_electra,
    maskplay_to_hf_electra_discriminator,
    maskplay_to_hf_electra_generator,
)
from .families.hf.gpt import (
    config_from_hf_bert_lm_head,
    gpt_from_hf_bert_lm_head,
    gpt_to_hf_bert_lm_head,
    hf_bert_lm_head_config_dict,
    hf_bert_lm_head_to_maskplay,
    maskplay_to_hf_bert_lm_head,
)
from .families.hf.sequence import sequence_classification_architecture
from .families.hf.xlnet import (
    XLNET_SPECIAL_IDS,
    config_from_hf_xlnet,
    hf_xlnet_config_dict,
    hf_xlnet_to_maskplay,
    maskplay_to_hf_xlnet,
)
from .finetune_convert import finetuned_from_hf_sequence_classification, finetuned_to_hf_sequence_classification

__all__ = [
    "ARCHITECTURES", "SEQUENCE_ARCHITECTURES", "XLNET_SPECIAL_IDS", "HFCheckpoint",
    "config_from_hf_bert", "config_from_hf_bert_lm_head", "config_from_hf_electra", "config_from_hf_xlnet",
    "finetuned_from_hf_sequence_classification", "finetuned_to_hf_sequence_classification", "from_hf",
    "gpt_from_hf_bert_lm_head", "gpt_to_hf_bert_lm_head", "hf_bert_lm_head_config_dict", "hf_bert_lm_head_to_maskplay",
    "hf_bert_to_maskplay", "hf_config_dict", "hf_electra_config", "hf_electra_discriminator_to_maskplay",
    "hf_electra_embeddings_equal", "hf_electra_generator_to_maskplay", "hf_electra_pair_to_maskplay",
    "hf_xlnet_config_dict", "hf_xlnet_to_maskplay", "maskplay_to_hf_bert", "maskplay_to_hf_bert_lm_head",
    "maskplay_to_hf_electra", "maskplay_to_hf_electra_discriminator", "maskplay_to_hf_electra_generator",
    "maskplay_to_hf_xlnet", "sequence_classification_architecture", "to_hf",
]
