"""spanprep's data side: Apache Beam jobs that turn a raw corpus into the preprocessed-corpus artifact
(schemas/FORMAT.md) and WikiText into an n-gram dictionary (schemas/NGRAM_DICTIONARY.md).

The folders follow the data: ``read/`` (raw files -> documents and dead letters), ``candidates/``
(documents -> documents with spaCy entity / noun-phrase spans), ``tokenize/`` (documents -> tokenized
documents), ``write/`` (tokenized documents -> rows -> Arrow shards, dead-letter files, manifest); the
elements that flow between them are in ``elements.py``. ``ngrams/`` holds the n-gram counting stages,
``report/`` the artifact's statistics and dataset card. On top, thin entry points: ``build_shards`` and
``build_ngram_dictionary`` (the two jobs, sharing the conventions of ``jobs.py``), ``verify``, ``demo``.
Importing this package does nothing but set ``__version__`` (the one version source).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("spanprep")
except _metadata.PackageNotFoundError:  # running from a checkout without `pip install -e .`
    __version__ = "0.1.0"
