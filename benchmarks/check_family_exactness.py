"""Whole-corpus exactness per tokenizer family (not timed: the check RESULTS.md quotes for issue 23).

For each family, a tokenizer trained here with the ``tokenizers`` library on WikiText-2 valid (WordPiece cased and
uncased, the pipeline's own trainer; a RoBERTa-style byte-level BPE; what ``SentencePieceUnigramTokenizer`` builds)
builds WikiText-2 valid + test and the whole Wikipedia sample, as distributed (``.tokens`` and ``.jsonl.zst``).
Then: ``pipeline.verify`` must pass, and for every document read back with the job's reader, its rows concatenated
must equal ``Tokenizer.encode(text, add_special_tokens=False)`` of the artifact's tokenizer, ids and word starts
(the pre-tokenizer's words). Prints one line per family and corpus; exits 1 if any document differs.

    python -m benchmarks.check_family_exactness [--families unigram,byte_level_bpe] [--wikipedia-docs N]
"""

from __future__ import annotations

import argparse
import io
import itertools
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.ipc as ipc
import zstandard
from tokenizers import SentencePieceUnigramTokenizer, Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline import build_shards
from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer as pipeline_tokenizer
from pipeline.verify import verify
from schemas.artifact import Artifact

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
WIKITEXT = [DATA / "wikitext-2" / "wiki.valid.tokens", DATA / "wikitext-2" / "wiki.test.tokens"]
WIKIPEDIA = DATA / "wikipedia-en-sample" / "pages.jsonl.zst"
FAMILIES = ("wordpiece", "wordpiece_uncased", "byte_level_bpe", "unigram")


def _training_texts() -> list[str]:
    return [
        d.text for d in read_file(str(WIKITEXT[0]), ReaderOptions(input_format="wikitext")) if isinstance(d, Document)
    ]


def train(family: str) -> str:
    """A tokenizer of ``family`` trained on WikiText-2 valid, as JSON."""
    texts = _training_texts()
    if family in ("wordpiece", "wordpiece_uncased"):
        return pipeline_tokenizer.train(texts, vocab_size=8000, lowercase=family == "wordpiece_uncased").to_str()
    if family == "byte_level_bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=5000,
            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        return tok.to_str()
    sp = SentencePieceUnigramTokenizer()
    sp.train_from_iterator(
        texts, vocab_size=8000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], unk_token="<unk>"
    )
    return sp._tokenizer.to_str()


def _rows_by_doc(artifact: Path) -> dict[str, tuple[list[int], list[bool]]]:
    out: dict[str, tuple[list[int], list[bool]]] = {}
    for shard in sorted((artifact / "shards").glob("*.arrow")):
        table = ipc.open_file(shard).read_all()
        for doc_id, ids, ws in zip(
            table.column("doc_id").to_pylist(),
            table.column("input_ids").to_pylist(),
            table.column("word_start").to_pylist(),
        ):
            got = out.setdefault(doc_id, ([], []))
            got[0].extend(ids)
            got[1].extend(ws)
    return out


def check(family: str, tokenizer_path: Path, inputs: list[Path], fmt: str, out: Path) -> bool:
    start = time.perf_counter()
    manifest = build_shards.run(
        [a for p in inputs for a in ("--input", str(p))]
        + ["--input-format", fmt, "--output", str(out), "--runner", "FnApiRunner", "--tokenizer", str(tokenizer_path)]
        + ["--progress-seconds", "0"]
    )
    report = verify(str(out))
    tok = Tokenizer.from_str(Artifact.open(str(out)).tokenizer_json())
    rows = _rows_by_doc(out)
    opts = ReaderOptions(input_format=fmt, wikitext_unk=manifest["tokenizer"]["special_tokens"]["unk"])  # as the job
    docs = [d for p in inputs for d in read_file(str(p), opts) if isinstance(d, Document)]
    differ, tokens = [], 0
    for doc in docs:
        enc = tok.encode(doc.text, add_special_tokens=False)
        w = enc.word_ids
        want = (enc.ids, [i == 0 or w[i] != w[i - 1] for i in range(len(w))])
        if rows.get(doc.doc_id) != want:
            differ.append(doc.doc_id)
        tokens += len(enc.ids)
    counts = manifest["counts"]
    print(
        f"{family:18s} {fmt:9s} documents {len(docs):5d} (written {counts['documents_written']}, dead-lettered "
        f"{counts['documents_dead_lettered']} {counts['dead_lettered_by_reason']}), tokens {tokens:,}, "
        f"long words {counts.get('long_words', 0)}, continuation rows {counts.get('continuation_rows', 0)}, "
        f"differ {len(differ)}{' ' + str(differ[:5]) if differ else ''}, verify {'OK' if report.ok else report.problems[:3]}"
        f" ({time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    return report.ok and not differ and len(docs) > 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--wikipedia-docs", type=int, default=None, help="only the first N articles (default: all)")
    args = ap.parse_args(argv)
    if not WIKIPEDIA.exists():
        print(f"{DATA}: not found (../shared/data)", file=sys.stderr)
        return 2
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        wikipedia = [WIKIPEDIA]
        if args.wikipedia_docs is not None:
            wikipedia = [Path(tmp) / "pages.jsonl"]
            with open(WIKIPEDIA, "rb") as f, open(wikipedia[0], "w", encoding="utf-8") as out:
                reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
                out.writelines(itertools.islice(reader, args.wikipedia_docs))
        for family in args.families.split(","):
            path = Path(tmp) / f"{family}.json"
            path.write_text(train(family), encoding="utf-8")
            ok &= check(family, path, WIKITEXT, "wikitext", Path(tmp) / f"{family}-wikitext")
            ok &= check(family, path, wikipedia, "jsonl", Path(tmp) / f"{family}-wikipedia")
    print("all documents exact" if ok else "SOME DOCUMENTS DIFFER (or verify failed)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
