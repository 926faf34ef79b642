"""The task registry: every task's file layout, labels, SpEx choices and metrics, declared (never guessed).

GLUE TSV layouts are those of the GLUE distribution (``glue_data/<TASK>/{train,dev}.tsv``) and, for CoLA, of
the CoLA 1.0 raw files (the same four columns, no header). A file with a header must carry exactly the
declared header, or reading refuses it with a clear message; every data row must have ``num_columns`` columns.

Sentence pairs are ``[CLS] text_a [SEP] text_b [SEP]`` in GLUE's column order (QNLI: the question first, as
GLUE and BERT).

SpEx-BERT (choices appended as text): the ``choices`` text is appended to the source text and the gold span
is the label's words in it (``label_words``). The choices list the label words in class-id order, so SST-2's are
"negative or positive?" (the paper's words; the paper writes them "positive or negative?"), RTE's and QNLI's
"entailment or not?" (the paper's); the others are terse ones of the same kind (the paper: "simpler is
better"). STS-B: the buckets 0.0 0.25 ... 5.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GLUE_KINDS = ("classification", "regression")


@dataclass(frozen=True, kw_only=True)
class Task:
    name: str
    kind: str  # "classification" | "regression" | "qa"
    description: str
    # GLUE TSV layout (column indices, 0-based); text_b None for single-sentence tasks.
    num_columns: int = 0
    header: tuple[str, ...] | None = None  # the exact header line, or None when the files have none
    text_a: int = -1
    text_b: int | None = None
    label: int = -1
    labels: tuple[str, ...] = ()  # classification: the label strings as written in the files, in class-id order
    # SpEx-BERT: the choices as text and, per label, the words of the choices that are its gold span.
    label_words: tuple[str, ...] = ()
    value_range: tuple[float, float] | None = None  # regression: the allowed range of the score
    metrics: tuple[str, ...] = ()
    main_metric: str = ""
    default_files: dict = field(default_factory=dict)  # split -> path relative to the data directory

    @property
    def is_pair(self) -> bool:
        return self.text_b is not None

    @property
    def num_labels(self) -> int:
        return len(self.labels) if self.kind == "classification" else 1

    @property
    def choices(self) -> str:
        """The SpEx-BERT text appended to the source text."""
        if self.kind == "regression":
            return " ".join(format_bucket(v) for v in buckets(self))
        words = list(self.label_words)
        if len(words) == 2:
            return f"{words[0]} or {words[1]}?"
        return ", ".join(words[:-1]) + f" or {words[-1]}?"


STSB_BUCKET = 0.25


def buckets(task: Task) -> list[float]:
    """Regression buckets (STS-B: 0.0 0.25 ... 5.0, SpEx-BERT's)."""
    if task.value_range is None:
        raise ValueError(f"task {task.name} is not a regression task: it has no value range")
    lo, hi = task.value_range
    n = int(round((hi - lo) / STSB_BUCKET))
    return [lo + i * STSB_BUCKET for i in range(n + 1)]


def format_bucket(value: float) -> str:
    """0.0, 0.25, 0.5, 0.75, 1.0, ...: the shortest decimal with at least one digit after the point."""
    text = f"{value:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task(
            name="rte",
            kind="classification",
            description="RTE, sentence-pair entailment",
            num_columns=4,
            header=("index", "sentence1", "sentence2", "label"),
            text_a=1,
            text_b=2,
            label=3,
            labels=("entailment", "not_entailment"),
            label_words=("entailment", "not"),
            metrics=("accuracy",),
            main_metric="accuracy",
            default_files={"train": "glue_rte/train.tsv", "dev": "glue_rte/dev.tsv"},
        ),
        Task(
            name="cola",
            kind="classification",
            description="CoLA, single-sentence acceptability",
            num_columns=4,
            header=None,
            text_a=3,
            label=1,
            labels=("0", "1"),
            label_words=("unacceptable", "acceptable"),
            metrics=("matthews", "accuracy"),
            main_metric="matthews",
            default_files={"train": "glue_cola/in_domain_train.tsv", "dev": "glue_cola/in_domain_dev.tsv"},
        ),
        Task(
            name="sst2",
            kind="classification",
            description="SST-2, single-sentence sentiment",
            num_columns=2,
            header=("sentence", "label"),
            text_a=0,
            label=1,
            labels=("0", "1"),
            label_words=("negative", "positive"),
            metrics=("accuracy",),
            main_metric="accuracy",
            default_files={"train": "glue_sst2/train.tsv", "dev": "glue_sst2/dev.tsv"},
        ),
        Task(
            name="mrpc",
            kind="classification",
            description="MRPC, sentence-pair paraphrase",
            num_columns=5,
            header=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            text_a=3,
            text_b=4,
            label=0,
            labels=("0", "1"),
            label_words=("different", "equivalent"),
            metrics=("f1", "accuracy"),
            main_metric="f1",
        ),
        Task(
            name="qnli",
            kind="classification",
            description="QNLI, question-sentence entailment",
            num_columns=4,
            header=("index", "question", "sentence", "label"),
            text_a=1,  # the question first (GLUE, BERT)
            text_b=2,
            label=3,
            labels=("entailment", "not_entailment"),
            label_words=("entailment", "not"),
            metrics=("accuracy",),
            main_metric="accuracy",
        ),
        Task(
            name="stsb",
            kind="regression",
            description="STS-B, sentence-pair similarity 0-5",
            num_columns=10,
            header=(
                "index",
                "genre",
                "filename",
                "year",
                "old_index",
                "source1",
                "source2",
                "sentence1",
                "sentence2",
                "score",
            ),
            text_a=7,
            text_b=8,
            label=9,
            value_range=(0.0, 5.0),
            metrics=("pearson", "spearman"),
            main_metric="pearson",
        ),
        Task(
            name="squad1",
            kind="qa",
            description="extractive QA, SQuAD v1.1 JSON (MRQA converts to it)",
            metrics=("exact_match", "f1"),
            main_metric="f1",
            default_files={"dev": "squad_format_xquad_en/xquad.en.json"},
        ),
        Task(
            name="squad2",
            kind="qa",
            description="extractive QA with unanswerable questions, SQuAD v2.0 JSON",
            metrics=("exact_match", "f1"),
            main_metric="f1",
        ),
    ]
}

HEADS_FOR_KIND = {
    "classification": ("cls", "spex", "span-ft"),
    "regression": ("cls", "spex", "span-ft"),
    "qa": ("span",),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def check_head(task: Task, head: str) -> None:
    allowed = HEADS_FOR_KIND[task.kind]
    if head not in allowed:
        raise ValueError(f"--head {head} does not fit task {task.name} ({task.kind}); use one of {', '.join(allowed)}")
