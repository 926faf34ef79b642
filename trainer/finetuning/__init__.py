"""Fine-tuning and evaluation (entry point: ``trainer/finetune.py``; docs/FINETUNING.md).

Modules, in import order (each imports only those above it, and ``trainer.model``/``config``/``engine``/
``export``, ``schemas.segmenter``/``schemas.tokenizers``):

- ``tasks``: the task registry (column layouts, label sets, SpEx choices, metrics), declared per task.
- ``metrics``, ``squad_metric``: GLUE metrics; the official SQuAD v1.1 EM/F1 rules (v2.0: empty = no answer).
- ``glue``, ``squad``: reading TSV / SQuAD JSON with bad-row accounting; QA windows and n-best decoding.
- ``encoding``: the model's tokenizer with its special roles (``ModelTokenizer``), text -> token ids, characters and
  words from offsets (any family), and BERT's ``[CLS] A [SEP] B [SEP]`` assembly with longest-first truncation.
- ``spex``: SpEx-BERT inputs (choices appended as text) and label decoding.
- ``span_ft``: Span Fine-tuning segmentation (n-gram dictionary, random, none) and the hierarchical CNN.
- ``features``: examples -> model inputs per head, collation.
- ``heads``: the encoder with a ``cls``, ``span``/``spex`` or ``span-ft`` head.
- ``options``: the run's options (one validated dataclass).
- ``checkpoint``: loading the encoder and tokenizer from a pre-training run or a Hugging Face export.
- ``loop``: DeepSpeed training and evaluation, metrics.json, predictions, the monitor.
"""
