"""The one rule for what a Hugging Face ``tokenizers`` JSON may not carry into spanprep: truncation and padding.

A tokenizer file from the hub often says ``"truncation": {"max_length": 512, ...}`` or ``"padding": {...}``; the
``tokenizers`` library then cuts or pads every ``encode`` to that length. spanprep cuts and pads itself (the
pipeline's packer; fine-tuning's windows, longest-first truncation and collate), so a tokenizer that does it too
silently drops text (question windows, answers) or puts pad ids inside a text. Every tokenizer a program loads from a
file it did not write goes through :func:`without_truncation_and_padding`: fine-tuning's and ``pretrain --init``'s
checkpoint tokenizers (``trainer.pretrained.tokenizer_from_json``) and the export (``trainer.export``). The artifact's
``tokenizer.json`` holds neither (FORMAT.md). Only the standard library is needed.
"""

from __future__ import annotations

import json

SETTINGS = ("truncation", "padding")


def without_truncation_and_padding(text: str) -> str:
    """``text`` (a ``tokenizers`` JSON) with ``truncation`` and ``padding`` null; the text unchanged, byte for byte,
    when both are null or absent already. A text that is not a JSON object is returned as it is (its reader says why
    it is no tokenizer)."""
    try:
        config = json.loads(text)
    except ValueError:
        return text
    if not isinstance(config, dict) or all(config.get(key) is None for key in SETTINGS):
        return text
    for key in SETTINGS:
        config[key] = None
    return json.dumps(config, ensure_ascii=False)
