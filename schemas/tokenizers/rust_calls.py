"""Calls into the ``tokenizers`` library that can panic, made into one-line errors.

``tokenizers`` is Rust: a file it cannot handle usually raises a bare ``Exception``, but some (a BPE merge whose
result is not in the vocabulary, a ``Precompiled`` normalizer with a broken character map, truncation with a stride
over its length) make Rust panic. pyo3 turns a panic into ``pyo3_runtime.PanicException``, a ``BaseException``
that ``except Exception`` lets through, and Rust's panic hook first writes the panic and a backtrace to the process's
standard error. :func:`guarded` catches both: whatever Rust writes to file descriptor 2 inside it is held back and
dropped when the call panicked (written out as it was otherwise), and any error becomes ``error(message)``.

Used where a tokenizer is loaded and where it first encodes: ``build_shards`` (every tokenizer source), ``verify``,
and for the trainer (``guarded`` imports neither Beam nor anything the trainer lacks).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def is_panic(e: BaseException) -> bool:
    """Whether ``e`` is pyo3's ``PanicException`` (its module ``pyo3_runtime`` cannot be imported by name)."""
    return type(e).__name__ == "PanicException"


@contextmanager
def _held_stderr() -> Iterator[list[bytes]]:
    """File descriptor 2 goes to a temporary file inside; what was written there is handed back in the list."""
    held: list[bytes] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            held.append(tmp.read())


def guarded(call: Callable[[], T], error: Callable[[str], BaseException]) -> T:
    """``call()``; an ``Exception`` or a Rust panic it raises becomes ``error(one line)`` (a panic's message is
    prefixed ``the tokenizers library panicked:``), and the panic's report on standard error is dropped."""
    failure: BaseException | None = None
    with _held_stderr() as held:
        try:
            result = call()
        except BaseException as e:
            failure = e
    if held[0] and (failure is None or not is_panic(failure)):
        os.write(2, held[0])
    if failure is None:
        return result
    if not (isinstance(failure, Exception) or is_panic(failure)):
        raise failure  # KeyboardInterrupt, SystemExit
    message = " ".join(str(failure).split()) or type(failure).__name__
    raise error(f"the tokenizers library panicked: {message}" if is_panic(failure) else message) from None
