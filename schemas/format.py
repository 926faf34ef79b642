"""The preprocessed-corpus artifact format: schemas, version and the checks every reader makes.

This module is the code half of ``schemas/FORMAT.md``. Writers (``pipeline.build_shards``) stamp
``FORMAT_VERSION`` into every shard's Arrow schema metadata and into ``manifest.json``; readers
(``pipeline.verify``, the trainer's loader, ``pipeline.report``) call :func:`check_format_version`
and refuse a major version they do not know.

Only pyarrow is needed here, so other teams can vendor this one file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

FORMAT_NAME = "spanprep-preprocessed-corpus"
# MAJOR.MINOR. A reader accepts any MINOR of a MAJOR it knows (minor versions only add
# optional metadata or files); a new MAJOR means a column changed meaning or type.
# 2.0: a row may start inside a word longer than a row (a continuation row, word_start[0] false; FORMAT.md).
# 2.1: removed/<reason>.jsonl (duplicates, contaminated documents), manifest removed, dedup and their counts.
# 2.2: sentence_start (and counts.sentences, sentences_cut) are NLTK's PunktSentenceTokenizer's sentences; the
# manifest's dedup.normalisation and contamination.normalisation name a word rule that deletes the characters
# tokenizers erase (docs/DEDUP.md); dedup.near.max_bucket and dedup.buckets_capped.
FORMAT_VERSION = "2.2"
SUPPORTED_MAJOR_VERSIONS = (1, 2)
# The first major version whose rows may be continuation rows; a 1.x artifact never holds one.
CONTINUATION_ROWS_SINCE = 2

MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
UNIGRAM_FILE = "unigram.arrow"
SHARDS_DIR = "shards"
DEAD_LETTER_DIR = "dead_letter"
REMOVED_DIR = "removed"  # format 2.1: valid documents left out (duplicate, contaminated), one file per reason
REPORT_DIR = "report"
CARD_FILE = "README.md"  # optional dataset card (python -m pipeline.report)
LOCK_FILE = "_build.lock"  # exists while a build writes the artifact; holds the build id

# Arrow schema metadata keys (bytes, as Arrow stores them).
META_FORMAT = b"spanprep.format"
META_FORMAT_VERSION = b"spanprep.format_version"

# Rows per Arrow record batch in a shard. Small enough that a loader can shuffle at batch
# granularity and read one batch without decompressing a whole shard.
ROWS_PER_BATCH = 128
# Arrow IPC body compression of shards; zstd is deterministic for a given level and input.
SHARD_COMPRESSION = "zstd"

# The special tokens every artifact's tokenizer has (BERT's), by role.
SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
# A model sequence is [CLS] row [SEP]: a row holds at most max_seq_len - SPECIAL_POSITIONS tokens.
SPECIAL_POSITIONS = 2


def continuation_rows_allowed(version: str) -> bool:
    """Whether an artifact of format ``version`` (a supported ``MAJOR.MINOR``) may hold continuation rows."""
    return parse_version(version)[0] >= CONTINUATION_ROWS_SINCE


def max_row_tokens(max_seq_len: int) -> int:
    """The most tokens a row may hold for sequences of ``max_seq_len`` ([CLS] row [SEP])."""
    return max_seq_len - SPECIAL_POSITIONS


UINT16_VOCAB_LIMIT = 65536
# manifest row_length_histogram: counts[i] = rows with length in [i*w + 1, (i+1)*w].
HISTOGRAM_BIN_WIDTH = 32


def histogram_bins(max_row_tokens: int) -> int:
    """How many bins ``row_length_histogram.counts`` has: enough for rows of 1..max_row_tokens tokens."""
    return -(-max_row_tokens // HISTOGRAM_BIN_WIDTH)


# Candidate span kinds, in column order. The value is the shard column holding them.
CANDIDATE_KINDS = {
    "entities": "entity_spans",
    "noun_phrases": "noun_phrase_spans",
    "ngrams": "ngram_spans",
}


class FormatError(ValueError):
    """The artifact is not one this code can read (unknown version, wrong schema, incomplete)."""


# What reading a damaged or hostile Arrow IPC file can raise: every pyarrow error (ArrowInvalid,
# ArrowNotImplementedError, ArrowTypeError, ArrowMemoryError, ...), I/O errors, and what Arrow's C++ side has been
# seen to surface for garbage (SystemError, MemoryError, IndexError). Readers turn these into one FormatError line.
ARROW_READ_ERRORS: tuple[type[BaseException], ...] = (
    pa.ArrowException,
    OSError,
    MemoryError,
    SystemError,
    ValueError,
    IndexError,
)


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception's message as one line of at most ``limit`` characters (Arrow's messages span lines)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field_type(f: pa.Field) -> str:
    return f"{f.type}{'' if f.nullable else ' not null'}"


def schema_difference(actual: pa.Schema, expected: pa.Schema) -> str:
    """One line saying how ``actual`` differs from ``expected`` (metadata ignored), for a reader's message."""
    try:
        have = {f.name: f for f in actual}
    except UnicodeDecodeError:  # a damaged file's column name
        return "a column name is not valid UTF-8"
    missing = [n for n in expected.names if n not in have]
    extra = [n for n in actual.names if n not in expected.names]
    changed = [
        f"column {f.name} is {_field_type(have[f.name])}, expected {_field_type(f)}"
        for f in expected
        if f.name in have and not have[f.name].equals(f)
    ]
    parts = changed[:2]
    if missing:
        parts.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        parts.append(f"unexpected column(s) {', '.join(extra)}")
    if not parts:
        parts.append(f"columns in the order {', '.join(actual.names)}, expected {', '.join(expected.names)}")
    return "; ".join(" ".join(p.split()) for p in parts)


def shard_of(doc_id: str, num_shards: int) -> int:
    """The shard a document's rows go to: stable across processes, machines and Python versions."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_shards


def split_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a local path or of any URI pyarrow.fs understands (gs://, s3://, ...)."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if uri.startswith("gs://") and emulator:
        # Google's client libraries (and so Beam and gcsfs) send gs:// to a GCS-compatible server named by
        # STORAGE_EMULATOR_HOST; pyarrow does not read it, so give it as endpoint_override (no credentials).
        scheme, _, host = emulator.rpartition("://")
        return pafs.GcsFileSystem(anonymous=True, endpoint_override=host.rstrip("/"), scheme=scheme or "http"), uri[
            len("gs://") :
        ]
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def read_if_present(fs: pafs.FileSystem, path: str) -> bytes | None:
    """The bytes of a file, or None when it does not exist (a manifest is written last: absent = incomplete)."""
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as f:
        return f.read()


def shard_filename(index: int, num_shards: int) -> str:
    """``shards/part-00003-of-00064.arrow``: relative to the artifact root."""
    return f"{SHARDS_DIR}/part-{index:05d}-of-{num_shards:05d}.arrow"


def token_id_type(vocab_size: int) -> pa.DataType:
    """uint16 when every id fits (vocab_size <= 65,536), else int32."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return pa.uint16() if vocab_size <= UINT16_VOCAB_LIMIT else pa.int32()


_SPAN = pa.struct([pa.field("start", pa.int32(), nullable=False), pa.field("end", pa.int32(), nullable=False)])
_LABELED_SPAN = pa.struct(
    [
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
    ]
)


def shard_schema(vocab_size: int) -> pa.Schema:
    """The exact Arrow schema of every shard of an artifact whose tokenizer has ``vocab_size`` ids.

    See ``schemas/FORMAT.md`` for what each column means; ``tests/schemas/test_schema.py`` pins this.
    """
    ids = token_id_type(vocab_size)
    fields = [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("seq_index", pa.int32(), nullable=False),
        pa.field("input_ids", pa.list_(pa.field("item", ids, nullable=False)), nullable=False),
        pa.field("word_start", pa.list_(pa.field("item", pa.bool_(), nullable=False)), nullable=False),
        pa.field("sentence_start", pa.list_(pa.field("item", pa.bool_(), nullable=False)), nullable=False),
        pa.field("entity_spans", pa.list_(pa.field("item", _LABELED_SPAN, nullable=False)), nullable=False),
        pa.field("noun_phrase_spans", pa.list_(pa.field("item", _SPAN, nullable=False)), nullable=False),
        pa.field("ngram_spans", pa.list_(pa.field("item", _SPAN, nullable=False)), nullable=False),
    ]
    metadata = {META_FORMAT: FORMAT_NAME.encode(), META_FORMAT_VERSION: FORMAT_VERSION.encode()}
    return pa.schema(fields, metadata=metadata)


def unigram_schema() -> pa.Schema:
    """``unigram.arrow``: one row per vocabulary id, in id order."""
    return pa.schema(
        [
            pa.field("token_id", pa.int32(), nullable=False),
            pa.field("token", pa.string(), nullable=False),
            pa.field("count", pa.int64(), nullable=False),
        ],
        metadata={META_FORMAT: FORMAT_NAME.encode(), META_FORMAT_VERSION: FORMAT_VERSION.encode()},
    )


def parse_version(version: str) -> tuple[int, int]:
    try:
        major, minor = version.split(".")
        return int(major), int(minor)
    except (AttributeError, ValueError):
        raise FormatError(
            f"malformed format version {version!r}: expected MAJOR.MINOR, e.g. {FORMAT_VERSION!r}"
        ) from None


def check_format_version(version: str | None, where: str) -> tuple[int, int]:
    """Raise :class:`FormatError` naming ``where`` unless ``version`` has a major version we know."""
    if version is None:
        raise FormatError(
            f"{where}: no format version found; this is not a {FORMAT_NAME} artifact (or it predates versioning)"
        )
    try:
        major, minor = parse_version(version)
    except FormatError as e:
        raise FormatError(f"{where}: {e}") from None
    if major not in SUPPORTED_MAJOR_VERSIONS:
        known = ", ".join(f"{m}.x" for m in SUPPORTED_MAJOR_VERSIONS)
        raise FormatError(
            f"{where}: format version {version} is not supported by this reader (it reads {known}); "
            f"upgrade spanprep or rebuild the artifact"
        )
    return major, minor


def check_schema_metadata(schema: pa.Schema, where: str) -> tuple[int, int]:
    """Check the version stamped in an Arrow file's schema metadata."""
    meta = schema.metadata or {}
    if meta.get(META_FORMAT) != FORMAT_NAME.encode():
        raise FormatError(
            f"{where}: Arrow schema metadata lacks {META_FORMAT.decode()}={FORMAT_NAME}; not a spanprep shard"
        )
    raw = meta.get(META_FORMAT_VERSION)
    return check_format_version(raw.decode("utf-8", "replace") if raw is not None else None, where)


def check_stamped_major(schema: pa.Schema, manifest_version: str, where: str) -> None:
    """An Arrow file of an artifact must be stamped with its manifest's major version (a 2.x manifest over shards a
    1.x writer stamped, or the reverse, is two writers' files); :class:`FormatError` naming ``where`` otherwise."""
    major, minor = check_schema_metadata(schema, where)
    want = parse_version(manifest_version)[0]
    if major != want:
        raise FormatError(
            f"{where}: stamped format version {major}.{minor}, but the manifest says {manifest_version}; an artifact's "
            f"files carry its manifest's major version"
        )


def check_manifest(manifest: Mapping[str, Any], where: str) -> tuple[int, int]:
    """Check a parsed manifest's identity and version; return (major, minor)."""
    if manifest.get("format") != FORMAT_NAME:
        raise FormatError(f"{where}: 'format' is {manifest.get('format')!r}, expected {FORMAT_NAME!r}")
    return check_format_version(manifest.get("format_version"), where)


def dumps_manifest(manifest: Mapping[str, Any]) -> str:
    """Canonical manifest JSON: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
