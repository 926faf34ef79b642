"""Preview a masking scheme on an artifact: write masked examples and print their statistics.

    .venv/bin/python -m trainer.preview_masking --data ARTIFACT --scheme span --num 100 --seed 0 --out masked.arrow

Takes the artifact's first ``--num`` rows (sample ids 0..num-1: shards in manifest order), masks them as the
trainer would at epoch ``--epoch`` with ``--seed`` as the masking seed, and writes an Arrow IPC file with one
row per example. Every list column is indexed by the model's input positions (``[CLS]`` row ``[SEP]``,
no padding):

    sample_id      int64         global sample id (masks are a function of seed, epoch and this id)
    original_ids   list<int32>   the sequence before masking
    masked_ids     list<int32>   the sequence the model sees
    labels         list<int32>   original id at MLM targets, -100 elsewhere
    word_start     list<bool>    true where a word starts ([CLS] and [SEP] are words of their own)
    span_left, span_right, span_position   list<int32>   the SBO targets (0 where not a target)

and prints: masked ratio, number of masked units (spans), mean unit length in words and tokens, and the
share of units masked with [MASK] / replaced by random tokens / kept, and the share of targets whose SBO boundary
(``span_left``/``span_right``) is itself a target (0: boundaries are taken around maximal masked runs).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from schemas import commands
from schemas import format as fmt
from trainer.data import BlockReader, index_blocks, open_artifact
from trainer.masking import IGNORE_INDEX, SCHEMES, Masker, MaskingConfig, masking_stats
from trainer.masking.sbo_targets import boundary_stats


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=commands.module("trainer.preview_masking"), description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="artifact directory or URI")
    p.add_argument("--scheme", default="span", choices=SCHEMES, help="masking scheme (default: span)")
    p.add_argument("--num", type=int, default=100, help="number of examples (the artifact's first rows)")
    p.add_argument("--seed", type=int, default=0, help="masking seed")
    p.add_argument("--epoch", type=int, default=0, help="epoch the masks are drawn for")
    p.add_argument("--out", required=True, help="output Arrow IPC file")
    p.add_argument("--max-seq-len", type=int, default=512)
    p.add_argument("--mask-ratio", type=float, default=0.15)
    return p.parse_args(argv)


def _lists(values: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ))


def preview(
    data: str, scheme: str, num: int, seed: int, epoch: int, out: str, max_seq_len: int = 512, mask_ratio: float = 0.15
) -> dict:
    """Write the preview file and return the statistics (see the module docstring)."""
    if num < 1:
        raise ValueError(f"--num must be at least 1; got {num}")
    cfg = MaskingConfig(scheme=scheme, seed=seed, mask_ratio=mask_ratio)
    artifact = open_artifact(data)
    blocks = index_blocks(artifact, list(range(len(artifact.manifest["shards"]))))
    total = blocks.num_samples
    if total == 0:
        raise ValueError(f"{data}: the artifact has no rows")
    num = min(num, total)
    room = fmt.max_row_tokens(max_seq_len)
    max_row = int(artifact.manifest.get("max_row_tokens", room))
    if max_row > room:
        raise ValueError(
            f"{data}: rows hold up to {max_row} tokens; --max-seq-len {max_seq_len} leaves room for {room}"
        )
    reader = BlockReader(
        artifact, artifact.vocab_size, room, cfg.candidate_column, cfg.excluded_entity_labels, capacity=4
    )
    where: list[tuple[str, int, int, int]] = []
    for k in range(len(blocks.rows)):
        for r in range(int(blocks.rows[k])):
            if len(where) == num:
                break
            where.append((blocks.shard_paths[blocks.shard[k]], int(blocks.batch[k]), int(blocks.rows[k]), r))
    rows = reader.gather(where)
    sample_ids = np.arange(num, dtype=np.int64)
    masker = Masker.from_artifact(cfg, artifact, max_seq_len=max_seq_len)
    masked = masker.mask(rows, sample_ids, epoch)

    # Sequences with [CLS]/[SEP], flat: insert one position before and after every row.
    n = np.diff(masked.offsets)
    L = n + fmt.SPECIAL_POSITIONS
    fo = np.concatenate([[0], np.cumsum(L)])
    content = np.arange(int(masked.offsets[-1])) - np.repeat(masked.offsets[:-1], n) + np.repeat(fo[:-1], n) + 1

    def seq(values: np.ndarray, cls_value, sep_value, dtype) -> np.ndarray:
        a = np.empty(int(fo[-1]), dtype=dtype)
        a[fo[:-1]] = cls_value
        a[fo[1:] - 1] = sep_value
        a[content] = values
        return a

    cls_id, sep_id = masker.cls_id, masker.sep_id
    table = pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.int64()),
            "original_ids": _lists(seq(masked.original_ids, cls_id, sep_id, np.int32), L, pa.int32()),
            "masked_ids": _lists(seq(masked.input_ids, cls_id, sep_id, np.int32), L, pa.int32()),
            "labels": _lists(seq(masked.labels, IGNORE_INDEX, IGNORE_INDEX, np.int32), L, pa.int32()),
            "word_start": _lists(seq(masked.word_start, True, True, bool), L, pa.bool_()),
            "span_left": _lists(seq(masked.span_left, 0, 0, np.int32), L, pa.int32()),
            "span_right": _lists(seq(masked.span_right, 0, 0, np.int32), L, pa.int32()),
            "span_position": _lists(seq(masked.span_position, 0, 0, np.int32), L, pa.int32()),
        }
    )
    with pa.OSFile(out, "wb") as f, ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return {
        **masking_stats(masked),
        **boundary_stats(masked.labels, masked.span_left, masked.span_right, masked.offsets),
        "scheme": scheme,
        "seed": seed,
        "epoch": epoch,
        "out": out,
    }


def format_stats(s: dict) -> str:
    lines = [
        f"scheme {s['scheme']}, seed {s['seed']}, epoch {s['epoch']}: {s['rows']} examples -> {s['out']}",
        f"masked ratio            {s['masked_ratio']:.4f}  ({s['targets']} targets / {s['maskable_tokens']} maskable tokens)",
        f"masked units (spans)    {s['units']}"
        + (f"  ({s['candidate_units']} from candidate spans)" if s["candidate_units"] else ""),
        f"mean span length        {s['mean_unit_words']:.3f} words, {s['mean_unit_tokens']:.3f} tokens",
        f"spans masked / replaced / kept   {s['share_masked']:.3f} / {s['share_replaced']:.3f} / {s['share_kept']:.3f}",
        f"targets with a masked SBO boundary   {s['masked_boundary_share']:.4f}  ({s['masked_boundary_targets']} of {s['targets_checked']})",
    ]
    return "\n".join(lines)


def run(argv=None) -> dict:
    args = parse_args(argv)
    try:
        stats = preview(
            args.data, args.scheme, args.num, args.seed, args.epoch, args.out, args.max_seq_len, args.mask_ratio
        )
    except (fmt.FormatError, ValueError, OSError) as e:
        raise SystemExit(f"preview_masking: error: {e}") from None
    print(format_stats(stats))
    sys.stdout.flush()
    return stats


if __name__ == "__main__":
    run()
