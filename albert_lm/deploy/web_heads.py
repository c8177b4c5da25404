"""Which outputs an exported graph gives, where a folder could give more than one: the encoder's
`last_hidden_state` (feature extraction, whatever head the folder also holds) or the masked-LM head's
`logits` (fill-mask, from a pretraining checkpoint). `albert_lm.deploy.export.export_onnx(head=...)`."""

from __future__ import annotations

from pathlib import Path

from torch import nn

HEADS = ("auto", "encoder", "masked_lm")


def head_model(model_dir: Path, head: str) -> tuple[nn.Module, list[str]]:
    """(model in eval mode, its output names) for `head` "encoder" or "masked_lm"; a folder without
    trained MLM weights is refused for "masked_lm", naming the folder."""
    from albert_lm.model.encoder import AlbertModel
    from albert_lm.model.heads import AlbertForMaskedLM
    from albert_lm.model.hf_interop import load_model

    if head == "masked_lm":
        return load_model(AlbertForMaskedLM, model_dir, require_head=True).eval(), ["logits"]
    if head == "encoder":
        return load_model(AlbertModel, model_dir).eval(), ["last_hidden_state"]
    raise ValueError(f"head {head!r}: expected one of {', '.join(HEADS)}")


__all__ = ["HEADS", "head_model"]
