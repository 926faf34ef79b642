"""spanprep trainer: SpanBERT-style pre-training with PyTorch and DeepSpeed ZeRO on preprocessed-corpus artifacts."""
