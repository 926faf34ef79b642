"""The n-gram dictionary format: schema, version, file names and the one reader.

This module is the code half of ``schemas/NGRAM_DICTIONARY.md``. The writer
(``pipeline.build_ngram_dictionary``) stamps ``FORMAT`` and ``FORMAT_VERSION`` into ``manifest.json`` and into
the Arrow schema metadata of ``ngrams.arrow``; every reader (``schemas.segmenter``, ``pipeline.report``) opens
a dictionary with :meth:`NgramDictionary.open`, which refuses an incomplete directory, another format and a
version it does not know.

Only pyarrow is needed here (and ``schemas/format.py``), so other teams can vendor the two files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from schemas.format import read_if_present, split_uri

FORMAT = "spanprep-ngram-dictionary"
FORMAT_VERSION = 1  # an integer: a new version means a file or column changed meaning
KNOWN_FORMAT_VERSIONS = (1,)

ARROW_FILE = "ngrams.arrow"
TSV_FILE = "ngrams.tsv"
DEAD_LETTER_FILE = "dead_letter.jsonl"
MANIFEST_FILE = "manifest.json"

SORT_ORDER = "count descending, then ngram ascending by Unicode code point (= UTF-8 byte order)"
COLUMNS = ("ngram", "n", "count")  # also the header line of ngrams.tsv, tab-separated
ARROW_SCHEMA = pa.schema(
    [
        pa.field("ngram", pa.string(), nullable=False),  # the tokens joined by one space
        pa.field("n", pa.int8(), nullable=False),  # number of tokens
        pa.field("count", pa.int64(), nullable=False),  # occurrences in the corpus
    ],
    metadata={"format": FORMAT, "format_version": str(FORMAT_VERSION)},
)


@dataclass(frozen=True)
class NgramDictionary:
    """A complete n-gram dictionary directory: its path as given, filesystem, root and checked manifest.

    :meth:`open` raises ``ValueError`` with a one-line message naming the path when the directory is not a
    complete dictionary in a version this code reads; reading its files may raise ``OSError`` or
    ``pyarrow.ArrowInvalid``.
    """

    path: str
    fs: pafs.FileSystem
    root: str
    manifest: dict[str, Any]

    @classmethod
    def open(cls, path: str) -> NgramDictionary:
        fs, root = split_uri(path.rstrip("/"))
        raw = read_if_present(fs, f"{root}/{MANIFEST_FILE}")
        if raw is None:
            raise ValueError(
                f"{path}: not a complete n-gram dictionary (no {MANIFEST_FILE}; it is written last, so the job "
                "that builds it did not finish, or this is not a dictionary directory)"
            )
        manifest = json.loads(raw.decode("utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"{path}: not an n-gram dictionary (format {manifest.get('format')!r})")
        if manifest.get("format_version") not in KNOWN_FORMAT_VERSIONS:
            raise ValueError(
                f"{path}: n-gram dictionary format version {manifest.get('format_version')!r} is not one this "
                f"code reads ({KNOWN_FORMAT_VERSIONS}); update spanprep"
            )
        return cls(path, fs, root, manifest)

    def file(self, name: str) -> str:
        """The filesystem path of one of the dictionary's files (e.g. ``ARROW_FILE``)."""
        return f"{self.root}/{name}"

    @property
    def lowercase(self) -> bool:
        """Whether the entries were lowercased (the job's ``--lowercase``)."""
        return bool(self.manifest["options"]["lowercase"])

    def read_table(self) -> pa.Table:
        """All of ``ngrams.arrow``, in its order (count descending, then ngram ascending)."""
        with self.fs.open_input_file(self.file(ARROW_FILE)) as f:
            return ipc.open_file(f).read_all()

    def arrow_sha256(self) -> str:
        """The sha256 of ``ngrams.arrow`` as stored, read in blocks (artifacts record it to name the dictionary)."""
        digest = hashlib.sha256()
        with self.fs.open_input_stream(self.file(ARROW_FILE)) as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
        return digest.hexdigest()
