"""What the input was made of: path_to_line -> (corpus_summary, dead_letters) (``CorpusSummary``)."""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.ngrams.rules import decode_line
from pipeline.read.wikitext import UNK, heading_level

CORPUS_FIELDS = (
    "lines",
    "blank_lines",
    "heading_lines",
    "paragraph_lines",
    "undecodable_lines",
    "paragraph_tokens",
    "unk_tokens",
)


class _SummarizeLines(beam.DoFn):
    """(path, raw line) -> one per-bundle dict of line/token counts; undecodable lines to ``dead_letter``."""

    DEAD_LETTER = "dead_letter"

    def start_bundle(self) -> None:
        self._summary = dict.fromkeys(CORPUS_FIELDS, 0)

    def process(self, path_and_line: tuple[str, bytes]):
        path, raw = path_and_line
        summary = self._summary
        summary["lines"] += 1
        line = decode_line(raw)
        if line is None:
            summary["undecodable_lines"] += 1
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                reason = f"not UTF-8: {e.reason} at byte {e.start}"
            yield beam.pvalue.TaggedOutput(
                self.DEAD_LETTER,
                {"source": path, "reason": reason, "line": raw.decode("utf-8", "backslashreplace")},
            )
            return
        tokens = line.split()
        if not tokens:
            summary["blank_lines"] += 1
        elif heading_level(line):
            summary["heading_lines"] += 1
        else:
            summary["paragraph_lines"] += 1
            summary["paragraph_tokens"] += len(tokens)
            summary["unk_tokens"] += tokens.count(UNK)

    def finish_bundle(self):
        if self._summary["lines"]:
            yield GlobalWindows.windowed_value(self._summary)


class _SumDicts(beam.CombineFn):
    def create_accumulator(self) -> dict[str, int]:
        return dict.fromkeys(CORPUS_FIELDS, 0)

    def add_input(self, acc: dict[str, int], summary: dict[str, int]) -> dict[str, int]:
        for key in CORPUS_FIELDS:
            acc[key] += summary[key]
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        total = self.create_accumulator()
        for acc in accs:
            self.add_input(total, acc)
        return total

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


class CorpusSummary(beam.PTransform):
    """path_to_line -> (corpus_summary, dead_letters): line kinds and token counts of the whole input, and one
    dead-letter record (source, reason, line) per line that is not UTF-8 (skipped by the counting passes)."""

    def expand(self, path_to_line):
        summaries = path_to_line | "SummarizeLines" >> beam.ParDo(_SummarizeLines()).with_outputs(
            _SummarizeLines.DEAD_LETTER, main="summaries"
        )
        corpus_summary = summaries.summaries | "SumSummaries" >> beam.CombineGlobally(_SumDicts())
        return corpus_summary, summaries[_SummarizeLines.DEAD_LETTER]
