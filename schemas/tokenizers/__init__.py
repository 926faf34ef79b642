"""The tokenizer rules both programs read: which tokenizers spanprep handles, who plays each special role and the
tokenizer for text (``families``); a tokenizers call that can panic made into one line (``rust_calls``).

The pipeline builds the artifact's rows with them and the trainer builds fine-tuning's inputs and reads ``--init``
checkpoints with them, so a tokenizer means the same on both sides. Nothing here imports Beam or torch.
"""
