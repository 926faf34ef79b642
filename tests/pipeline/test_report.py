"""`python -m pipeline.report`: plots, index.html and the dataset card, on real WikiText-2 with mask candidates
and on the embedded demo corpus; statistics checked against the shards read independently; the page rendered
in headless Chromium when it is installed."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import yaml

from pipeline import report
from pipeline.report.common import DEFAULT_EXAMPLES, KIND_CSS
from pipeline.report.page import render_example
from pipeline.report.statistics import Example, collect, read_dictionary
from pipeline.verify import verify
from schemas import format as fmt
from schemas.artifact import Artifact
from tests.conftest import DEMO_CORPUS, build, wikitext2_articles

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
SOURCE_LICENSE = (
    "WikiText-2: Creative Commons Attribution-ShareAlike 3.0 (Merity et al., 2016), from Wikipedia <articles> & co."
)


# ---------------------------------------------------------------------------------------------
# Artifacts
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wikitext_reported(tmp_path_factory) -> Path:
    """The first 4 articles of WikiText-2 validation, with spaCy entity and noun-phrase candidates, reported."""
    src = wikitext2_articles(4, tmp_path_factory.mktemp("wt"))
    out = tmp_path_factory.mktemp("report-wt") / "wt2-first4"
    build(
        src,
        out,
        "--input-format",
        "wikitext",
        "--train-tokenizer",
        "--vocab-size",
        "4000",
        "--num-shards",
        "2",
        "--mask-candidates",
        "entities,noun_phrases",
    )
    report.write_report(str(out), license="cc-by-sa-3.0", source_license=SOURCE_LICENSE, progress=None)
    return out


@pytest.fixture(scope="module")
def demo_reported(demo_artifact, tmp_path_factory) -> Path:
    """A copy of the demo artifact (no candidates), reported through a file:// URI (the pyarrow.fs URI path)."""
    out = tmp_path_factory.mktemp("report-demo") / "demo"
    shutil.copytree(demo_artifact, out)
    assert report.main([out.as_uri(), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def bad_input_reported(tmp_path_factory) -> Path:
    """JSONL with good documents and three bad records, built with `build_shards --report`."""
    src = tmp_path_factory.mktemp("bad") / "docs.jsonl"
    good = [
        "The first document has two sentences. It is short.",
        "The second one is shorter still.",
        "A third: Ada Lovelace wrote notes on the Analytical Engine in London.",
    ]
    lines = [json.dumps({"id": f"g{i}", "text": t}) for i, t in enumerate(good)]
    lines[1:1] = [
        '{"id": "broken", "text": "<Ada & co> never closed',
        json.dumps({"id": "no-text"}),
        json.dumps({"id": "blank", "text": ""}),
    ]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("report-bad") / "bad-input"
    build(
        src, out, "--input-format", "jsonl", "--train-tokenizer", "--vocab-size", "300", "--num-shards", "1", "--report"
    )
    return out


@pytest.fixture(params=["wikitext_reported", "demo_reported", "bad_input_reported"])
def reported(request) -> Path:
    return request.getfixturevalue(request.param)


def _manifest(artifact: Path) -> dict:
    return json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# Files: PNGs, HTML references, verify
# ---------------------------------------------------------------------------------------------
def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header; fails unless the file is a complete PNG."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name}: not a PNG"
    assert data[12:16] == b"IHDR", f"{path.name}: no IHDR chunk first"
    assert data[-8:-4] == b"IEND", f"{path.name}: no IEND chunk at the end (truncated?)"
    return struct.unpack(">II", data[16:24])


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data", "poster", "background") and value is not None:
                self.refs.append((tag, name, value))

    def handle_data(self, data):
        self.text.append(data)


def _page(artifact: Path) -> _Page:
    p = _Page()
    p.feed((artifact / "report" / "index.html").read_text(encoding="utf-8"))
    p.close()
    return p


def test_every_plot_is_a_png_of_sensible_size(reported):
    pngs = sorted((reported / "report").glob("*.png"))
    assert len(pngs) >= 7, [p.name for p in pngs]
    for path in pngs:
        width, height = png_size(path)
        assert 400 <= width <= 2000 and 150 <= height <= 2000, (path.name, width, height)
        assert path.stat().st_size > 4000, (path.name, path.stat().st_size)


def test_the_page_references_only_files_that_exist_and_shows_every_plot(reported):
    page = _page(reported)
    report_dir = reported / "report"
    assert page.refs, "no reference at all"
    for tag, attr, value in page.refs:
        assert not re.match(r"^[a-z]+:|^//", value, re.I), f"external or absolute reference <{tag} {attr}={value!r}>"
        assert (report_dir / value).resolve().is_file(), f"<{tag} {attr}={value!r}>: no such file"
    shown = {v for tag, attr, v in page.refs if tag == "img"}
    assert shown == {p.name for p in report_dir.glob("*.png")}  # every plot shown, no plot left over
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags


def test_verify_still_passes_with_the_report_and_the_card(reported):
    assert (reported / "README.md").is_file() and (reported / "report" / "index.html").is_file()
    result = verify(str(reported))
    assert result.ok, result.problems
    assert result.checked["rows checked"] == _manifest(reported)["counts"]["rows"] > 0


def test_key_figures_on_the_page_are_the_manifests(reported):
    html_text = (reported / "report" / "index.html").read_text(encoding="utf-8")
    cards = dict(re.findall(r'<div class="k">([^<]+)</div><div class="v">([^<]+)</div>', html_text))
    c = _manifest(reported)["counts"]
    assert cards["rows"] == f"{c['rows']:,}" and c["rows"] > 0
    assert cards["tokens"] == f"{c['tokens']:,}"
    assert cards["documents written"] == f"{c['documents_written']:,}"
    assert cards["dead-lettered"] == f"{c['documents_dead_lettered']:,}"


# ---------------------------------------------------------------------------------------------
# The dataset card
# ---------------------------------------------------------------------------------------------
def _card(artifact: Path) -> tuple[dict, str]:
    text = (artifact / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def test_card_numbers_equal_the_manifests(reported):
    m = _manifest(reported)
    _, body = _card(reported)
    counts_section = body.split("\n## Counts\n", 1)[1].split("\n## ", 1)[0]
    table = {k: int(v.replace(",", "")) for k, v in re.findall(r"^\| `([\w.]+)` \| ([\d,]+) \|$", counts_section, re.M)}
    expected = {k: v for k, v in m["counts"].items() if isinstance(v, int)}
    expected.update({f"dead_lettered_by_reason.{r}": n for r, n in m["counts"]["dead_lettered_by_reason"].items()})
    for kind in m["candidates"]["kinds"]:
        expected[f"candidates.spans.{kind}"] = m["candidates"]["spans"][kind]
        expected[f"candidates.dropped_at_row_boundary.{kind}"] = m["candidates"]["dropped_at_row_boundary"][kind]
    assert table == expected and len(table) >= 9
    for source in m["inputs"]:
        row = next(line for line in body.splitlines() if f"`{source['sha256']}`" in line)
        assert f"| {source['bytes']:,} |" in row and f"| {source['documents_read']:,} |" in row
    assert shlex.join(["python", "-m", "pipeline.build_shards", *m["command"]]) in body
    versions = dict(m["created_by"])
    assert f"| {versions.pop('package')} | {versions.pop('version')} |" in body
    for name, version in versions.items():
        assert f"| {name} | {version} |" in body


def test_card_front_matter_is_a_hugging_face_dataset_card(reported):
    m = _manifest(reported)
    front, body = _card(reported)
    assert front["task_categories"] == ["fill-mask"] and front["language"] == ["en"]
    lo, hi = {"n<1K": (0, 1e3), "1K<n<10K": (1e3, 1e4), "10K<n<100K": (1e4, 1e5)}[front["size_categories"][0]]
    assert lo <= m["counts"]["rows"] < hi
    assert front["configs"][0]["data_files"][0] == {"split": "train", "path": "shards/*.arrow"}
    assert front["pretty_name"] == reported.name
    for snippet in (
        'datasets.load_dataset("arrow", data_files=',
        "ipc.open_file(",
        "deepspeed trainer/pretrain.py",
        "## Limitations",
    ):
        assert snippet in body


def test_card_licences_are_what_the_user_gave(wikitext_reported, demo_reported):
    front, body = _card(wikitext_reported)
    assert front["license"] == "cc-by-sa-3.0" and SOURCE_LICENSE in body
    front, body = _card(demo_reported)
    assert front["license"] == "unknown" and "--license" in body and "--source-license" in body


# ---------------------------------------------------------------------------------------------
# Statistics against the shards, read independently
# ---------------------------------------------------------------------------------------------
def _rows(artifact: Path) -> list[dict]:
    rows = []
    for shard in sorted((artifact / "shards").glob("*.arrow")):
        rows += ipc.open_file(str(shard)).read_all().to_pylist()
    return rows


def _doc_totals(rows: list[dict]) -> list[int]:
    totals: list[int] = []
    for r in rows:
        if r["seq_index"] == 0:
            totals.append(0)
        totals[-1] += len(r["input_ids"])
    return sorted(totals)


def test_full_read_statistics_equal_the_shards_and_the_manifest(wikitext_reported):
    art = Artifact.open(str(wikitext_reported))
    m = art.manifest
    stats = collect(art)
    rows = _rows(wikitext_reported)
    assert not stats.sampled and stats.rows_read == len(rows) == m["counts"]["rows"] > 0
    assert stats.tokens_read == m["counts"]["tokens"]
    assert sorted(stats.doc_tokens) == _doc_totals(rows) and len(stats.doc_tokens) == m["counts"]["documents_written"]
    for kind, column in fmt.CANDIDATE_KINDS.items():
        spans = [(r, s) for r in rows for s in r[column]]
        assert stats.spans_read[kind] == m["candidates"]["spans"][kind] == len(spans)
        per_row = np.bincount([len(r[column]) for r in rows])
        assert np.array_equal(np.trim_zeros(stats.spans_per_row[kind], "b"), np.trim_zeros(per_row, "b"))
        tokens = np.bincount(np.array([s["end"] - s["start"] for _, s in spans], np.int64), minlength=1)
        words = np.bincount(
            np.array([sum(r["word_start"][s["start"] : s["end"]]) for r, s in spans], np.int64), minlength=1
        )
        assert np.array_equal(np.trim_zeros(stats.span_tokens[kind], "b"), np.trim_zeros(tokens, "b"))
        assert np.array_equal(np.trim_zeros(stats.span_words[kind], "b"), np.trim_zeros(words, "b"))
        covered = sum(len({i for s in r[column] for i in range(s["start"], s["end"])}) for r in rows)
        assert stats.tokens_covered[kind] == covered
    assert stats.spans_read["entities"] > 0 and stats.spans_read["noun_phrases"] > 0
    labels = {}
    for r in rows:
        for s in r["entity_spans"]:
            labels[s["label"]] = labels.get(s["label"], 0) + 1
    assert dict(stats.entity_labels) == labels


@pytest.fixture(scope="module")
def short_rows_artifact(tmp_path_factory) -> Path:
    """The demo corpus in rows of at most 22 tokens: about 1,900 rows, documents of ~50 rows, so documents cross
    record batches (128 rows) and an artifact has enough batches to sample from."""
    out = tmp_path_factory.mktemp("short-rows") / "artifact"
    build(
        DEMO_CORPUS,
        out,
        "--input-format",
        "jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "1000",
        "--num-shards",
        "2",
        "--max-seq-len",
        "24",
    )
    return out


def test_sampling_is_seeded_and_counts_whole_documents(short_rows_artifact):
    art = Artifact.open(str(short_rows_artifact))
    full = _doc_totals(_rows(short_rows_artifact))
    whole = collect(art)
    assert not whole.sampled and sorted(whole.doc_tokens) == full and whole.batches_total > 10
    followed = 0
    for seed in range(6):
        a = collect(art, max_rows=300, seed=seed, examples=2)
        b = collect(art, max_rows=300, seed=seed, examples=2)
        assert a.sampled and 1 < a.batches_read < a.batches_total and 300 - 128 <= a.rows_read <= 300 + 128
        assert a.doc_tokens == b.doc_tokens and [e.input_ids for e in a.examples] == [e.input_ids for e in b.examples]
        remaining = list(full)
        for total in a.doc_tokens:  # every sampled document has its whole length, not the part in the batch
            assert total in remaining, (seed, total)
            remaining.remove(total)
        followed += a.batches_followed
    assert followed > 0  # sampled batches ended inside documents that were followed into the next batches
    assert a.scope().startswith(f"a sample of {a.rows_read:,} of {a.rows_total:,} rows") and "seed 5" in a.scope()


# ---------------------------------------------------------------------------------------------
# Example rows: escaped text, spans marked where they are
# ---------------------------------------------------------------------------------------------
class _Marks(HTMLParser):
    """Text chunks with the classes of the elements around them; label text set apart."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[set[str]] = []
        self.chunks: list[tuple[str, set[str]]] = []
        self.labels: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.stack.append(set((dict(attrs).get("class") or "").split()))

    def handle_endtag(self, tag):
        self.stack.pop()

    def handle_data(self, data):
        classes = set().union(*self.stack) if self.stack else set()
        if "lbl" in classes:
            self.labels.append(data)
        else:
            self.chunks.append((data, classes))

    def runs(self, css: str) -> list[str]:
        """Text of each marked span of one kind (a run of chunks with the class, split where one starts)."""
        out: list[str] = []
        inside = False
        for text, classes in self.chunks:
            if css in classes:
                if not inside or f"{css}-s" in classes:
                    out.append("")
                out[-1] += text
                inside = True
            elif text.strip():
                inside = False
        return out


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _check_rendering(tok, ex: Example, kinds: list[str]) -> int:
    marks = _Marks()
    marks.feed(render_example(tok, ex, kinds))
    marks.close()
    assert "".join(t for t, _ in marks.chunks) == tok.decode(ex.input_ids, skip_special_tokens=False)
    checked = 0
    for kind in kinds:
        spans = sorted(ex.spans[kind])
        runs = marks.runs(KIND_CSS[kind])
        assert [_squash(r) for r in runs] == [
            _squash(tok.decode(ex.input_ids[s:e], skip_special_tokens=False)) for s, e, _ in spans
        ]
        checked += len(spans)
    if "entities" in kinds:
        assert marks.labels == [label for _, _, label in sorted(ex.spans["entities"], key=lambda s: (s[1], s[0]))]
    return checked


def test_example_rows_show_the_decoded_text_with_every_span_marked(wikitext_reported):
    from tokenizers import Tokenizer

    art = Artifact.open(str(wikitext_reported))
    tok = Tokenizer.from_str(art.tokenizer_json())
    stats = collect(art, examples=6)
    assert len(stats.examples) == 6
    assert sum(_check_rendering(tok, ex, ["entities", "noun_phrases"]) for ex in stats.examples) > 0
    page = (wikitext_reported / "report" / "index.html").read_text(encoding="utf-8")
    assert page.count('<div class="example">') == DEFAULT_EXAMPLES


def test_example_text_is_escaped():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    words = '[UNK] Tom & < b > Jerry / met in New York \' s " park " .'.split()
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    enc = tok.encode('Tom & <b>Jerry</b> met in New York\'s "park".')
    ids, word_ids = enc.ids, enc.word_ids
    starts = [i == 0 or word_ids[i] != word_ids[i - 1] for i in range(len(ids))]
    ny = enc.tokens.index("New")
    ex = Example("shards/x.arrow", 0, 0, "d", 0, ids, starts, {
        "entities": [(0, 1, "PERSON"), (2, 7, "<WORK>"), (ny, ny + 2, "GPE")],
        "noun_phrases": [(0, 7, ""), (ny, ny + 4, "")],
        "ngrams": [],
    })  # fmt: skip
    out = render_example(tok, ex, ["entities", "noun_phrases", "ngrams"])
    assert "<b" not in out and "</b" not in out and "&lt; b &gt;" in out and "&amp;" in out and "&lt;WORK&gt;" in out
    assert _check_rendering(tok, ex, ["entities", "noun_phrases", "ngrams"]) == 5


# ---------------------------------------------------------------------------------------------
# Empty data, the n-gram dictionary, errors, determinism, build_shards --report
# ---------------------------------------------------------------------------------------------
def test_without_candidates_the_span_plots_say_so(demo_reported):
    page = (demo_reported / "report" / "index.html").read_text(encoding="utf-8")
    captions = re.findall(r'<img src="(\w+)\.png"[^>]*><figcaption>([^<]*)</figcaption>', page)
    said = {name for name, caption in captions if "without --mask-candidates" in caption}
    assert {"spans_per_row", "span_lengths", "entity_labels"} <= said


def _write_dictionary(path: Path, entries: list[tuple[str, int]]) -> dict:
    """A dictionary directory in pipeline.build_ngram_dictionary's documented format."""
    path.mkdir(parents=True)
    rows = sorted(entries, key=lambda e: (-e[1], e[0]))
    table = pa.table(
        {
            "ngram": [g for g, _ in rows],
            "n": pa.array([g.count(" ") + 1 for g, _ in rows], pa.int8()),
            "count": pa.array([c for _, c in rows], pa.int64()),
        }
    )
    with ipc.new_file(str(path / "ngrams.arrow"), table.schema) as w:
        w.write_table(table, max_chunksize=7)
    (path / "manifest.json").write_text(
        json.dumps({"format": "spanprep-ngram-dictionary", "format_version": 1, "entries_per_n": {"2": 1}})
    )
    sha = hashlib.sha256((path / "ngrams.arrow").read_bytes()).hexdigest()
    return {"path": str(path), "sha256": sha, "entries": len(rows), "max_n": 3, "lowercase": False}


def test_the_dictionary_section_shows_its_top_ngrams_or_says_it_is_unreachable(demo_artifact, tmp_path):
    entries = [(f"word{i} next{i}", 1000 - 37 * i) for i in range(20)] + [("New York City", 5000), ("of the", 5000)]
    info = _write_dictionary(tmp_path / "dict", entries)
    d = read_dictionary(info, limit=10, per_n_limit=3)
    assert (
        d.reachable and [(r["ngram"], r["count"]) for r in d.top] == sorted(entries, key=lambda e: (-e[1], e[0]))[:10]
    )
    bigrams = sorted((e for e in entries if e[0].count(" ") == 1), key=lambda e: (-e[1], e[0]))
    assert d.per_n[2] == (len(bigrams), [{"ngram": g, "n": 2, "count": c} for g, c in bigrams[:3]])
    assert d.per_n[3] == (1, [{"ngram": "New York City", "n": 3, "count": 5000}])
    assert "sha256 matches" in d.message
    changed = read_dictionary({**info, "sha256": "0" * 64})
    assert changed.reachable and "differs from the one used" in changed.message
    gone = read_dictionary({**info, "path": str(tmp_path / "elsewhere")})
    assert not gone.reachable and "not reachable" in gone.message
    future = tmp_path / "future"
    shutil.copytree(tmp_path / "dict", future)
    (future / "manifest.json").write_text(json.dumps({"format": "spanprep-ngram-dictionary", "format_version": 2}))
    unknown = read_dictionary({**info, "path": str(future)})
    assert not unknown.reachable and "format version 2 is not one this code reads" in unknown.message

    out = tmp_path / "artifact"
    shutil.copytree(demo_artifact, out, ignore=shutil.ignore_patterns("report", "README.md"))
    art = Artifact.open(str(out))
    manifest = copy.deepcopy(art.manifest)
    manifest["candidates"]["ngram_dictionary"] = info
    report.write_report(Artifact(art.uri, art.fs, art.root, manifest), examples=0, progress=None)
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert png_size(out / "report" / "ngrams.png")[0] >= 400
    assert re.search(r"<td[^>]*>2</td><td[^>]*>21</td><td>of the \(5,000\) · word0 next0 \(1,000\) · ", page)
    assert re.search(r"<td[^>]*>3</td><td[^>]*>1</td><td>New York City \(5,000\)</td>", page)
    manifest["candidates"]["ngram_dictionary"] = {**info, "path": str(tmp_path / "elsewhere")}
    report.write_report(Artifact(art.uri, art.fs, art.root, manifest), examples=0, progress=None)
    assert "not reachable" in (out / "report" / "index.html").read_text(encoding="utf-8")
    assert not (out / "report" / "ngrams.png").exists()  # the old plot does not linger


def test_the_same_artifact_gives_the_same_report(demo_reported):
    before = {p.name: p.read_bytes() for p in (demo_reported / "report").iterdir()}
    before["README.md"] = (demo_reported / "README.md").read_bytes()
    assert report.main([demo_reported.as_uri(), "--quiet"]) == 0
    after = {p.name: p.read_bytes() for p in (demo_reported / "report").iterdir()}
    after["README.md"] = (demo_reported / "README.md").read_bytes()
    assert after == before and len(before) > 8


def test_the_report_does_not_import_the_build_job(demo_reported):
    """No import circle: the card lists the job's options from the manifest, which keeps Beam's apart."""
    code = (
        "import sys; from pipeline import report; assert report.main([sys.argv[1], '--quiet']) == 0; "
        "print(sorted(m for m in sys.modules if m.startswith('pipeline.')))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(demo_reported)], capture_output=True, text=True, check=True)
    loaded = done.stdout.strip()
    assert "pipeline.report.card" in loaded and "pipeline.build_shards" not in loaded


def test_missing_or_incomplete_artifacts_are_clear_errors(demo_artifact, tmp_path, capsys):
    assert report.main([str(tmp_path / "nowhere")]) == 2
    assert (
        capsys.readouterr().err.strip() == f"report: error: {tmp_path / 'nowhere'}: artifact directory does not exist"
    )
    incomplete = tmp_path / "incomplete"
    shutil.copytree(demo_artifact, incomplete, ignore=shutil.ignore_patterns("manifest.json", "report", "README.md"))
    assert report.main([str(incomplete), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("report: error: ") and "incomplete artifact: no manifest.json" in err
    assert not (incomplete / "report").exists() and not (incomplete / "README.md").exists()
    shard_gone = tmp_path / "shard-gone"
    shutil.copytree(demo_artifact, shard_gone, ignore=shutil.ignore_patterns("report", "README.md"))
    victim = _manifest(shard_gone)["shards"][1]["path"]
    (shard_gone / victim).unlink()
    assert report.main([str(shard_gone), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("report: error: ") and victim in err and "Traceback" not in err


def test_build_shards_report_option_writes_the_report_with_the_dead_letters(bad_input_reported):
    m = _manifest(bad_input_reported)
    assert m["options"]["report"] is True and m["command"][-1] == "--report"
    c = m["counts"]
    assert c["documents_written"] == 3 and c["dead_lettered_by_reason"] == {
        "malformed_json": 1,
        "missing_text": 1,
        "empty_text": 1,
    }
    page = (bad_input_reported / "report" / "index.html").read_text(encoding="utf-8")
    links = {v for tag, attr, v in _page(bad_input_reported).refs if tag == "a" and "dead_letter/" in v}
    assert links == {f"../{d['path']}" for d in m["dead_letter"]} and len(links) == 3
    assert "&lt;Ada &amp; co&gt;" in page  # the malformed record's preview, escaped


# ---------------------------------------------------------------------------------------------
# Headless Chromium
# ---------------------------------------------------------------------------------------------
CONSOLE_PROBLEMS = re.compile(r"CONSOLE|Uncaught|Failed to load|ERR_FILE_NOT_FOUND|Not allowed to load|net::ERR_")


def _chromium(url: str, out: Path, tmp: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / 'chromium-profile'}", "--enable-logging=stderr", "--v=0", "--window-size=1200,2400",
         f"--screenshot={out}", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_the_page_renders_in_headless_chromium_without_console_errors(wikitext_reported, tmp_path):
    # The check can fail: a page with a script error is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>undefined_function()</script></body></html>")
    _, err = _chromium(bad.as_uri(), tmp_path / "bad.png", tmp_path)
    assert CONSOLE_PROBLEMS.search(err), err[-2000:]

    shot = tmp_path / "page.png"
    code, err = _chromium((wikitext_reported / "report" / "index.html").as_uri(), shot, tmp_path)
    assert code == 0, err[-2000:]
    problems = [line for line in err.splitlines() if CONSOLE_PROBLEMS.search(line)]
    assert not problems, problems
    assert png_size(shot) == (1200, 2400)
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 100  # text, tables and plots drawn, not a blank page
