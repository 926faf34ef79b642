"""Progress of long builds (pipeline/progress.py): Beam counters of documents and raw bytes read on every runner,
progress lines from the launcher of a local run, and worker processes that keep Beam's INFO chatter to themselves."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline import progress
from pipeline.ngrams.lines import ReadLines
from pipeline.read.documents import ReadDocuments
from pipeline.read.records import ReaderOptions, read_file
from tests.conftest import DEMO_CORPUS, REPO
from tests.support import beam_services


def _counters(result) -> dict[str, int]:
    found = result.metrics().query(MetricsFilter().with_namespace(progress.NAMESPACE))["counters"]
    totals: dict[str, int] = {}
    for c in found:
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + c.committed
    return totals


def test_the_readers_count_documents_and_raw_bytes_in_beam_counters(tmp_path):
    # a whole compressed file (raw = compressed bytes) and an uncompressed one read as byte ranges
    packed = tmp_path / "demo.jsonl.gz"
    packed.write_bytes(gzip.compress(DEMO_CORPUS.read_bytes()))
    size = packed.stat().st_size + DEMO_CORPUS.stat().st_size
    p = TestPipeline(runner="FnApiRunner")
    _ = p | ReadDocuments([str(packed), str(DEMO_CORPUS)], ReaderOptions(input_format="jsonl"), split_bytes=16384)
    counters = _counters(p.run())
    assert counters["documents"] == 80
    # the ranges of a jsonl file end where the next begins: every raw byte is counted once
    assert counters["bytes"] == size


def test_input_read_outside_a_bundle_never_reaches_a_later_jobs_counters(tmp_path):
    """A launcher (or an earlier test in this process) that reads input itself counts those bytes in this process;
    they went into the Beam counters of the next bundle that flushed, so a later job read "285,548 of 212,443 bytes"
    (found by CI: the test above, after another test in the same worker read a file outside Beam)."""
    for _ in range(2):  # the first read's first count flushes at once (outside any bundle); the rest stays pending
        assert sum(1 for _ in read_file(str(DEMO_CORPUS), ReaderOptions(input_format="jsonl"))) == 41
    p = TestPipeline(runner="FnApiRunner")
    _ = p | ReadDocuments([str(DEMO_CORPUS)], ReaderOptions(input_format="jsonl"), split_bytes=16384)
    counters = _counters(p.run())
    assert counters["documents"] == 40 and counters["bytes"] == DEMO_CORPUS.stat().st_size


class _ReadThenFail(beam.DoFn):
    def process(self, path):
        for _ in range(2):  # the first read's first count flushes at once; the rest waits for the bundle's end
            assert sum(1 for _ in read_file(path, ReaderOptions(input_format="jsonl"))) == 41
        raise ValueError("this bundle fails")


def test_a_failed_bundle_leaves_its_counts_to_no_later_bundle():
    """A bundle that counted its reading and failed before it flushed: a runner that retries it (Dataflow) or runs
    another job in the process would have put those bytes in the next bundle's counters as well."""
    p = TestPipeline(runner="FnApiRunner")
    _ = p | beam.Create([str(DEMO_CORPUS)]) | beam.ParDo(_ReadThenFail())
    with pytest.raises(Exception, match="this bundle fails"):
        p.run()
    p = TestPipeline(runner="FnApiRunner")
    _ = p | ReadDocuments([str(DEMO_CORPUS)], ReaderOptions(input_format="jsonl"), split_bytes=16384)
    counters = _counters(p.run())
    assert counters["documents"] == 40 and counters["bytes"] == DEMO_CORPUS.stat().st_size


def test_text_documents_read_as_byte_ranges_count_each_byte_once(tmp_path):
    """A text document runs on past the end of its byte range, so the range read on; those bytes were counted by it
    and by the next range ("1.7 of 0.2 MB read (100.0%)" with --split-bytes 4096; found by the attack round)."""
    corpus = tmp_path / "docs.txt"
    corpus.write_text("".join(f"Document {i} has a first line.\nAnd a second one, longer.\n\n" for i in range(3000)))
    p = TestPipeline(runner="FnApiRunner")
    _ = p | ReadDocuments([str(corpus)], ReaderOptions(input_format="text"), split_bytes=4096)
    counters = _counters(p.run())
    assert counters["documents"] == 3000 and counters["bytes"] == corpus.stat().st_size


def test_the_ngram_line_reader_counts_lines_and_bytes(tmp_path):
    corpus = tmp_path / "wiki.tokens"
    corpus.write_bytes(b"a b c\n\nd e\n" * 1000)
    p = TestPipeline(runner="FnApiRunner")
    _ = p | beam.Create([str(corpus)]) | ReadLines(split_bytes=4096)
    counters = _counters(p.run())
    assert counters["documents"] == 3000 and counters["bytes"] == corpus.stat().st_size


def test_the_ngram_line_reader_counts_the_raw_bytes_of_crlf_lines_and_of_a_last_line_without_newline(tmp_path):
    """Beam strips a line's ``\\r\\n`` or ``\\n``; the reader counted one byte per line for it, so a CRLF file read
    one byte short per line (11,000 of 14,000 bytes here) and a file without a final newline one byte over."""
    crlf, unended = tmp_path / "crlf.tokens", tmp_path / "unended.tokens"
    crlf.write_bytes(b"a b c\r\n\r\nd e\r\n" * 1000)
    unended.write_bytes(b"a b c\n\nd e\n" * 1000 + b"f g")
    p = TestPipeline(runner="FnApiRunner")
    lines = p | beam.Create([str(crlf), str(unended)]) | ReadLines(split_bytes=4096, with_filename=True)
    assert_that(
        lines | beam.Map(lambda fl: (fl[0].rsplit("/", 1)[-1], fl[1])) | beam.combiners.Count.PerElement(),
        equal_to(
            [(("crlf.tokens", b"a b c"), 1000), (("crlf.tokens", b""), 1000), (("crlf.tokens", b"d e"), 1000)]
            + [
                (("unended.tokens", b"a b c"), 1000),
                (("unended.tokens", b""), 1000),
                (("unended.tokens", b"d e"), 1000),
            ]
            + [(("unended.tokens", b"f g"), 1)]
        ),
    )
    counters = _counters(p.run())
    assert counters["documents"] == 6001 and counters["bytes"] == crlf.stat().st_size + unended.stat().st_size


def test_describe_gives_the_share_the_rate_and_an_eta():
    line = progress.describe(12_345, 120_500_000, 1_160_000_000, 60.0)
    assert line == "12,345 documents, 120.5 of 1,160.0 MB read (10.4%) in 1m00s, 2.0 MB/s, ETA 8m38s"
    assert progress.describe(5, 3_000_000, None, 2.0, "lines") == "5 lines, 3.0 MB read in 2s, 1.5 MB/s"


def test_describe_phases_gives_each_read_its_own_figures_and_time():
    """The main read first, then the others by label; the phase begun first timed from the job's start (100 s),
    a later one from its first count (110 s), so its rate and ETA are its own."""
    phases = {progress.MAIN: (10, 1_000_000, 110.0), "dedup pre-pass": (40, 4_000_000, 102.0)}
    line = progress.describe_phases(phases, 4_000_000, 100.0, 120.0, "documents")
    assert line == (
        "10 documents, 1.0 of 4.0 MB read (25.0%) in 10s, 0.1 MB/s, ETA 30s; "
        "dedup pre-pass: 40 documents, 4.0 of 4.0 MB read (100.0%) in 20s, 0.2 MB/s, input read"
    )
    assert progress.describe_phases({}, 4_000_000, 100.0, 101.0, "documents") == progress.describe(0, 0, 4_000_000, 1.0)


def test_a_local_multi_process_build_reports_progress_and_its_workers_are_quiet(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.build_shards",
            "--input",
            str(DEMO_CORPUS),
            "--output",
            str(tmp_path / "out"),
            "--vocab-size",
            "500",
            "--num-shards",
            "2",
            "--direct_running_mode",
            "multi_processing",
            "--direct_num_workers",
            "2",
            "--progress-seconds",
            "0.2",
        ],
        cwd=REPO,
        env=beam_services.checkout_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "pipeline.progress: progress: " in line]
    assert len(lines) >= 2, proc.stderr[-3000:]
    size = DEMO_CORPUS.stat().st_size / 1e6
    last = re.search(r"progress: (\d+) documents, ([\d.]+) of ([\d.]+) MB read \(([\d.]+)%\)", lines[-1])
    assert last is not None, lines[-1]
    assert int(last.group(1)) == 40 and float(last.group(3)) == round(size, 1) and last.group(4) == "100.0"
    # Beam's start-up chatter of the worker processes (about 25 INFO lines each before)
    for chatter in ("Creating insecure control channel", "semi_persistent_directory", "Python sdk harness starting"):
        assert chatter not in proc.stderr, chatter


def test_tokenizer_training_in_the_launcher_reports_its_reading(caplog, tmp_path):
    import logging

    from pipeline import build_shards

    o, _ = build_shards._parse(["--input", str(DEMO_CORPUS), "--output", str(tmp_path / "out"), "--vocab-size", "500"])
    size = DEMO_CORPUS.stat().st_size
    with caplog.at_level(logging.INFO, logger="pipeline.build_shards"):
        build_shards._load_tokenizer(o, [str(DEMO_CORPUS)], size, every_s=1e-9)  # a line at every document
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenizer training: ")]
    assert len(lines) == 40, lines[-3:]
    assert lines[-1].startswith(
        f"tokenizer training: 40 documents, {size / 1e6:.1f} of {size / 1e6:.1f} MB read (100.0%)"
    )


def test_on_a_terminal_the_progress_is_a_tqdm_bar(tmp_path):
    import os
    import pty

    leader, follower = pty.openpty()  # the job's stderr is a terminal
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.build_ngram_dictionary", "--input", str(DEMO_CORPUS), "--output",
         str(tmp_path / "out"), "--min-count", "3", "--progress-seconds", "0.1"],
        cwd=REPO, env=beam_services.checkout_env(), stdout=subprocess.DEVNULL, stderr=follower,
        start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the job ended: the terminal is closed
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=300) == 0, seen[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "pipeline.progress: progress:" not in text  # no progress lines on a terminal ...
    bars = re.findall(r"read: +100%\|[^|]*\| *([\d.]+)k/([\d.]+)k \[[^\]]*, (\d+) lines\]", text)
    assert bars, text[-2000:]  # ... but a bar, which ends full, with the lines counted: those of the read begun
    assert int(bars[-1][2]) == 40  # last (apriori pruning's second read, a phase of its own: both summed gave 80)


_PART = r"(\d+) documents, ([\d.]+) of ([\d.]+) MB read \(([\d.]+)%\)"


def test_a_dedup_build_reports_its_pre_pass_apart_and_counts_each_document_once(tmp_path, caplog):
    """--dedup reads the input twice (the pre-pass, then the main pass): each read is its own part of the progress
    line, each counting every document and byte once (both were summed: 2 x the documents, "input read" while the
    main pass had read none), and the manifest's documents_read is the input's documents."""
    import logging

    from tests.conftest import build
    from tests.pipeline.test_dedup import planted_corpus

    corpus = tmp_path / "corpus.jsonl"
    n = len(planted_corpus(corpus))
    size = round(corpus.stat().st_size / 1e6, 1)
    with caplog.at_level(logging.INFO, logger="pipeline.progress"):
        m = build(corpus, tmp_path / "out", "--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2",
                  "--dedup", "near", "--progress-seconds", "0.02")  # fmt: skip
    assert m["counts"]["documents_read"] == n and m["counts"]["documents_duplicate"] > 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: ")]
    assert lines
    for line in lines:
        main = re.match(r"progress: " + _PART, line)
        prepass = re.search(r"dedup pre-pass: " + _PART, line)
        assert main or prepass, line
        for part in (main, prepass):
            if part:
                assert int(part.group(1)) <= n and float(part.group(2)) <= size and float(part.group(4)) <= 100, line
        if main and int(main.group(1)):  # the main pass reads after the pre-pass has read everything (its side input)
            assert prepass and int(prepass.group(1)) == n and prepass.group(4) == "100.0", line
    last = lines[-1]
    assert re.match(rf"progress: {n} documents, {size} of {size} MB read \(100.0%\) .*, input read; ", last), last
    assert re.search(rf"; dedup pre-pass: {n} documents, {size} of {size} MB read \(100.0%\) .*, input read$", last)
