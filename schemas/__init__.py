"""The two formats spanprep writes and reads, each a prose spec, schema code and one reader, and the rules both
programs read (the pipeline and the trainer import them from here, never from each other).

``format`` and ``artifact``: the preprocessed-corpus artifact (``FORMAT.md``; rows, shards, manifest, the
special tokens and the two special positions a row leaves free); ``manifest``: the shape of ``manifest.json``
and the rule for the paths it names; ``invariants``: the row checks ``pipeline.verify`` and the trainer's loader
share; ``ngram_dictionary``: the n-gram dictionary (``NGRAM_DICTIONARY.md``) and ``segmenter``, its greedy
longest-match segmentation (the shard job's n-gram candidates, Span Fine-tuning's segments); ``commands``: how a
message writes one of the project's commands (with the interpreter that runs it); ``quick_exit``: how both
programs' commands end once their work is done; ``tokenizers``: the tokenizer rules (families, special roles, a
Hugging Face directory's tokenizer). What flows in: paths or URIs of an artifact or a dictionary; what flows out:
checked manifests, Arrow schemas and tables, or a one-line error. Only pyarrow and numpy are needed (and
``tokenizers`` for ``schemas.tokenizers``); never Beam or torch; importing the package has no side effects.
"""
