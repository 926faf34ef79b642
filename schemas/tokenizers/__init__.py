"""The tokenizer rules both programs read: which tokenizers spanprep handles, who plays each special role and the
tokenizer for text (``families``); a Hugging Face tokenizer directory read as ``transformers.AutoTokenizer`` reads
it (``hf_directory``); ``tokenizer.json`` and ``vocab.txt`` read as transformers reads them, through a reader the
caller gives (``files``: the jobs read through Beam, the trainer local paths); a tokenizers call that can panic made
into one line (``rust_calls``).

The pipeline builds the artifact's rows with them and the trainer builds fine-tuning's inputs and reads ``--init``
checkpoints with them, so a tokenizer means the same on both sides. Nothing here imports Beam or torch.
"""
