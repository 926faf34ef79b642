"""4. Write: tokenized documents -> rows -> the artifact (schemas/FORMAT.md).

In: :class:`~pipeline.elements.TokenizedDocument` s, dead letters and input summaries. Out: Arrow shards
(``WriteShards`` in ``shards.py``, rows cut by the packers of ``packing.py``), ``dead_letter/*.jsonl``
(``WriteDeadLetters`` in ``dead_letters.py``), and last ``unigram.arrow``, ``tokenizer.json`` and
``manifest.json`` (``WriteManifest`` in ``manifest.py``).
"""
