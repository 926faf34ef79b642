"""How much of each evaluation set an existing artifact holds: n-gram overlap of its documents with the examples.

    .venv/bin/python -m pipeline.contamination ARTIFACT --eval ../shared/data/finetune/squad_format_xquad_en/xquad.en.json \\
        --eval ../shared/data/finetune/glue_rte/dev.tsv [--ngram 13] [--json]

Reads the artifact's own rows (local, gs://, s3://), a document at a time: the ids of a document's rows are joined
and decoded with the artifact's tokenizer.json, so no source text is needed. No n-gram spans an unknown word (a word
holding ``[UNK]``/``<unk>`` is left out and cuts the text) or two documents (two documents may share a doc_id; with
``full-sentences`` packing the separator token ends one). The evaluation files are read as
distributed (SQuAD v1.1/v2.0 and XQuAD JSON, GLUE TSV, JSONL with a text field: ``pipeline.dedup.eval_sets``) and
their n-grams held in memory; the corpus never is. Overlap rules: ``pipeline.dedup.overlap`` and docs/DEDUP.md; the
word rule is the one the artifact recorded (``dedup.normalisation`` or ``contamination.normalisation``: format 2.1
artifacts keep the rule before the erased characters were deleted, :func:`artifact_rule`).

Prints one line per evaluation file, or with ``--json`` one JSON object keyed by evaluation file (as given), each
entry with ``examples``, ``examples_contaminated``, ``examples_too_short``, ``ngrams``, ``ngrams_found``,
``ngram_fraction_found``, ``documents`` (the corpus doc ids involved) and ``contaminated_examples``. Exit 0 when it
ran (contamination found or not), 2 for a bad option or evaluation file, 1 for an artifact that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator

from pipeline.runners import jobs  # before Beam: it hides a warning Beam logs while it is imported (see jobs.py)

# isort: split
import numpy as np
from tokenizers import Tokenizer, decoders

from pipeline.dedup import text
from pipeline.dedup.eval_sets import EvalFileError, given_twice, read_eval_file, twice_message
from pipeline.dedup.overlap import DEFAULT_N, EvalSet, OverlapIndex
from pipeline.runners.jobs import UsageError
from schemas import commands
from schemas import format as fmt
from schemas.artifact import Artifact

log = logging.getLogger("pipeline.contamination")


def artifact_tokenizer(art: Artifact) -> Tokenizer:
    """The artifact's tokenizer, decoding WordPiece pieces into words even when its file names no decoder."""
    try:
        tok = Tokenizer.from_str(art.tokenizer_json())
    except Exception as e:  # tokenizers raises a bare Exception for every file it cannot parse
        raise fmt.FormatError(f"{art.display(art.manifest['tokenizer']['file'])}: {fmt.one_line(e)}") from None
    if tok.decoder is None and json.loads(tok.to_str())["model"]["type"] == "WordPiece":
        tok.decoder = decoders.WordPiece()
    return tok


def unknown_ids(art: Artifact, tok: Tokenizer) -> np.ndarray:
    """The ids that stand for unknown text: the unk role's and the model's own (a Unigram trained by ``tokenizers``
    holds ``<unk>`` twice, as its piece 3 that the model emits and as an added token that the role names)."""
    model = json.loads(tok.to_str())["model"]
    ids = {art.special_token_ids["unk"]}
    if isinstance(model.get("unk_id"), int):
        ids.add(model["unk_id"])
    named = tok.token_to_id(model["unk_token"]) if isinstance(model.get("unk_token"), str) else None
    if named is not None:
        ids.add(named)
    return np.array(sorted(ids))


def document_texts(tok: Tokenizer, ids: np.ndarray, word_start: np.ndarray, unk: np.ndarray) -> list[str]:
    """One document's tokens decoded as texts that no n-gram may span: every word (the tokenizer's, as
    ``word_start`` marks it) holding the unknown token is left out and cuts the text there, as the source's unknown
    word is no word of the evaluation set's either (skipping ``[UNK]`` alone would join its neighbours)."""
    if not len(ids):
        return []
    unknown = np.isin(ids, unk)
    if not unknown.any():
        return [tok.decode(ids.tolist(), skip_special_tokens=True)]
    word = np.cumsum(word_start)
    keep = ~np.isin(word, word[unknown])
    edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.astype(np.int8), [0]))))
    return [tok.decode(ids[s:e].tolist(), skip_special_tokens=True) for s, e in zip(edges[::2], edges[1::2])]


def _row_documents(art: Artifact, shard: str, sep: int, full_sentences: bool):
    """(doc_id, ids, word_start) per document of one shard, its rows joined. A document starts at a row whose
    doc_id differs from the row before; with ``doc-sentences`` also at ``seq_index`` 0 (two documents may share an
    id, FORMAT.md); with ``full-sentences`` rows cross documents: the separator token between two documents ends
    one, and a document with no row starting in it is named ``<doc_id of its row>+k`` (the k-th after it)."""
    reader = art.open_shard(shard)
    current: str | None = None
    ids: list[np.ndarray] = []
    starts: list[np.ndarray] = []

    def flush():
        if current is not None and ids:
            yield current, np.concatenate(ids), np.concatenate(starts)

    for b in range(reader.num_record_batches):
        batch = reader.get_batch(b)
        doc_ids = batch.column("doc_id").to_pylist()
        seq = batch.column("seq_index").to_pylist()
        rows = batch.column("input_ids").to_numpy(zero_copy_only=False)
        word_starts = batch.column("word_start").to_numpy(zero_copy_only=False)
        for doc_id, s, row, ws in zip(doc_ids, seq, rows, word_starts, strict=True):
            row, ws = np.asarray(row), np.asarray(ws, dtype=bool)
            if doc_id != current or (s == 0 and not full_sentences):
                yield from flush()
                current, ids, starts = doc_id, [], []
            if not full_sentences:
                ids.append(row)
                starts.append(ws)
                continue
            cuts = np.flatnonzero(row == sep)
            begin = 0
            for k, cut in enumerate(cuts.tolist(), 1):
                ids.append(row[begin:cut])
                starts.append(ws[begin:cut])
                yield from flush()
                current, ids, starts, begin = f"{doc_id}+{k}", [], [], cut + 1
            ids.append(row[begin:])
            starts.append(ws[begin:])
    yield from flush()


def artifact_documents(art: Artifact, tok: Tokenizer) -> Iterator[tuple[str, list[str]]]:
    """(doc_id, texts) per document, shard by shard (:func:`document_texts`, :func:`_row_documents`)."""
    sep, unk = art.special_token_ids["sep"], unknown_ids(art, tok)
    full_sentences = art.manifest.get("pack") == "full-sentences"
    for shard in art.shard_paths:
        for doc_id, tokens, word_start in _row_documents(art, shard, sep, full_sentences):
            yield doc_id, document_texts(tok, tokens, word_start, unk)


def load_eval_sets(paths: list[str], n: int, text_field: str = "text", erase: bool = True) -> list[EvalSet]:
    """Every evaluation file's n-grams under the word rule (``erase``: ``text.normalise``'s); UsageError (one line,
    file and position) for a file that cannot be used."""
    return [EvalSet.build(path, examples, n, erase) for path, examples in _read_eval_files(paths, text_field)]


def _read_eval_files(paths: list[str], text_field: str) -> list[tuple[str, list]]:
    out = []
    for path in paths:
        try:
            examples = read_eval_file(path, text_field)
        except EvalFileError as e:
            raise UsageError(str(e)) from None
        if not examples:
            raise UsageError(f"{path}: no examples")
        out.append((path, examples))
    return out


def artifact_rule(art: Artifact) -> bool:
    """Whether the word rule the artifact recorded deletes the characters tokenizers erase (``text.RULES``): the
    ``normalisation`` of its ``dedup`` or ``contamination`` (format 2.2 records both); a name this code does not know,
    or a ``contamination`` without one (format 2.1), is a rule older than the deletion; an artifact that compared
    nothing at build time is read by the current rule."""
    m = art.manifest
    dedup, cont = m.get("dedup") or {}, m.get("contamination") or {}
    name = dedup.get("normalisation") or cont.get("normalisation")
    if name is None:
        return not cont
    return text.RULES.get(name, False)


def check(artifact: str, eval_paths: list[str], n: int = DEFAULT_N, text_field: str = "text") -> dict:
    """The report of ``OverlapIndex.report`` for one artifact, plus ``documents_scanned`` under the key ``""``. The
    evaluation files and the artifact's documents are read by the word rule the artifact recorded."""
    read = _read_eval_files(eval_paths, text_field)
    art = Artifact.open(artifact)
    erase = artifact_rule(art)
    sets = []
    for path, examples in read:
        sets.append(EvalSet.build(path, examples, n, erase))
        log.info("%s: %d examples, %d distinct %d-grams", path, len(examples), len(sets[-1].hashes), n)
    index = OverlapIndex(sets, n, erase)
    for doc_id, texts in artifact_documents(art, artifact_tokenizer(art)):
        index.scan(doc_id, texts)
    log.info("%s: %d documents scanned", artifact, index.documents_scanned)
    return index.report()


def describe(report: dict) -> str:
    lines = []
    for name, r in report.items():
        share = r["examples_contaminated"] / r["examples"] if r["examples"] else 0.0
        lines.append(
            f"{name}: {r['examples']:,} examples, {r['examples_contaminated']:,} contaminated ({share:.1%}) sharing a "
            f"{r['ngram_size']}-gram with {len(r['documents']):,} corpus document(s); "
            f"{r['ngrams_found']:,} of {r['ngrams']:,} distinct {r['ngram_size']}-grams found, "
            f"{r['ngram_fraction_found']:.1%} of a contaminated example's on average; "
            f"{r['examples_too_short']:,} too short to check"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=commands.module("pipeline.contamination"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("artifact", help="artifact directory (local, gs://, s3://)")
    parser.add_argument("--eval", action="append", required=True, help="evaluation file; repeatable")
    parser.add_argument("--ngram", type=int, default=DEFAULT_N, help=f"words per n-gram (default {DEFAULT_N})")
    parser.add_argument("--text-field", default="text", help="JSONL evaluation files: the text field")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    jobs.configure_logging()
    if args.ngram < 1:
        print(f"contamination: error: --ngram must be at least 1, got {args.ngram}", file=sys.stderr)
        return 2
    twice = given_twice(args.eval)
    if twice:  # its examples would be counted twice
        print(f"contamination: error: {twice_message('--eval', *twice)}", file=sys.stderr)
        return 2

    def run() -> None:
        report = check(args.artifact, args.eval, args.ngram, args.text_field)
        print(json.dumps(report, sort_keys=True, ensure_ascii=False) if args.json else describe(report))

    return jobs.exit_code("contamination", run)


if __name__ == "__main__":
    sys.exit(main())
