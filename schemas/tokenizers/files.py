"""A tokenizer's files read as transformers reads them: ``tokenizer.json`` (:func:`from_file`) and ``vocab.txt``
(:func:`read_vocab_txt`), through the reader the caller gives.

The rules are the same for both programs; where the bytes come from is not. The pipeline reads local paths and
gs:// / s3:// through Beam's FileSystems (``pipeline.files.BEAM_FILES``, which honours the job's S3 options); the
trainer reads the local checkpoint ``--init`` names (:data:`LOCAL`). A reader is :class:`Files`: ``read``,
``exists``, ``join``; nothing here imports Beam.
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from tokenizers import Tokenizer

from schemas.tokenizers.families import TokenizerError
from schemas.tokenizers.rust_calls import guarded


class Files(Protocol):
    """Where a tokenizer's files are read from."""

    def read(self, path: str) -> bytes: ...

    def exists(self, path: str) -> bool: ...

    def join(self, directory: str, name: str) -> str: ...


class LocalFiles:
    """Local paths: the files of a checkpoint directory on this machine."""

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def join(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)


LOCAL = LocalFiles()


# Rust's ``char::is_whitespace`` (Unicode White_Space): what ``tokenizers``' vocab.txt reader trims off each line's
# end. Python's ``str.isspace`` differs (it counts U+001C..U+001F, which Rust keeps).
_RUST_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def read_vocab_txt(path: str, files: Files) -> dict[str, int]:
    """A ``vocab.txt`` read as transformers reads it (``BertTokenizer`` hands the path to ``tokenizers``'
    ``WordPiece``, whose reader is Rust's): lines end at a line feed only (not at U+2028, U+0085 or a lone carriage
    return, which ``str.splitlines`` would also split at), each without its trailing whitespace; id = line number
    from 0. A token on two lines (transformers keeps the later id, and the earlier id names nothing), bytes
    that are not UTF-8 and a leading byte-order mark are refused, naming the line."""
    raw = files.read(path)
    if raw.startswith(b"\xef\xbb\xbf"):  # transformers would make it part of the first token ("\ufeff[PAD]")
        raise TokenizerError(
            f"{path}: line 1 starts with a byte-order mark (U+FEFF), which would be part of its token: save the file "
            "as UTF-8 without a BOM"
        )
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the line feed ending the last line
    vocab: dict[str, int] = {}
    for i, line in enumerate(lines):
        try:
            token = line.decode("utf-8").rstrip(_RUST_WHITESPACE)
        except UnicodeDecodeError as e:
            raise TokenizerError(
                f"{path}: line {i + 1}: not UTF-8 (byte {line[e.start]:#04x} at column {e.start + 1})"
            ) from None
        if token in vocab:
            raise TokenizerError(f"{path}: line {i + 1}: token {token!r} already appears on line {vocab[token] + 1}")
        vocab[token] = i
    if not vocab:
        raise TokenizerError(f"{path}: empty vocabulary")
    return vocab


def from_file(path: str, files: Files) -> Tokenizer:
    """A tokenizer from a Hugging Face ``tokenizer.json`` (read by ``files``)."""
    raw = files.read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not UTF-8 (byte {e.start})") from None
    if _looks_like_tokenizer_config(text):
        raise TokenizerError(
            f"{path}: a tokenizer_config.json (transformers' settings), not a tokenizer.json: give its directory "
            "with --tokenizer-from DIR"
        )
    return guarded(
        lambda: Tokenizer.from_str(text),
        lambda message: TokenizerError(f"{path}: not a Hugging Face tokenizers JSON file: {message}"),
    )


def _looks_like_tokenizer_config(text: str) -> bool:
    """A JSON object without a tokenizer.json's ``model`` but with keys only transformers' tokenizer_config.json has."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    keys = ("tokenizer_class", "added_tokens_decoder", "do_lower_case", "model_max_length")
    return isinstance(value, dict) and "model" not in value and any(k in value for k in keys)
