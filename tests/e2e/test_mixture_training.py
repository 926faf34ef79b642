"""`trainer/pretrain.py` on a mixture of two real artifacts (WikiText-2 valid and a Wikipedia slice, same tokenizer):
ZeRO-2 on two CPU ranks trains and evaluates per source, its step-4 checkpoint resumed on one rank repeats and skips
no sample, a resume with other weights continues each source where it stopped, the result exports; and the refusals
(one line, exit 2, before any process group)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port
from test_elastic_resume import COMMON, GLOBAL_BATCH, PROBE, SAVED_AT, ds_config

from tests.support.mixture_data import wikipedia_slice
from tests.support.pretrain_runs import DEEPSPEED, REPO, TIMEOUT, metric, resume_from, run_env

MAX_STEPS = 8


@pytest.fixture(scope="module")
def sources(tmp_path_factory, wikitext2_artifact) -> tuple[Path, Path]:
    wiki = wikipedia_slice(tmp_path_factory.mktemp("wikipedia_slice"), wikitext2_artifact / "tokenizer.json")
    return wikitext2_artifact, wiki


def probe(run_dir: Path, ranks: int, *extra: str, samples_only: bool = False) -> str:
    """Train (or resume) RUN_DIR with ZeRO-2 on ``ranks`` ranks through tests/support/elastic_probe.py (the global
    batch is GLOBAL_BATCH whatever the ranks); returns stdout."""
    cmd = (
        [sys.executable, str(PROBE)]
        if ranks == 1
        else [str(DEEPSPEED), "--num_gpus", str(ranks), "--master_port", str(free_port()), str(PROBE)]
    )
    cmd += ["--deepspeed_config", str(ds_config(run_dir.parent, 2, ranks)), "--output-dir", str(run_dir), *COMMON]
    env = {**run_env(), "SPANPREP_PROBE_DIR": str(run_dir / "probe")}
    if samples_only:
        env["SPANPREP_PROBE_SAMPLES_ONLY"] = "1"
    proc = subprocess.run([*cmd, *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def global_stream(run_dir: Path) -> dict[int, list[tuple[int, int]]]:
    """step -> the (source, sample id) of the step's global batch in stream order (rank 0's, then rank 1's)."""
    per_step: dict[int, list[tuple[int, list]]] = {}
    for path in sorted((run_dir / "probe").glob("samples_rank*.jsonl")):
        rank = int(path.stem.removeprefix("samples_rank"))
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            micro = [list(zip(s, i)) for s, i in zip(rec["sources"], rec["micro_batches"])]
            per_step.setdefault(rec["step"], []).append((rank, micro))
    return {step: [p for _, micro in sorted(parts) for b in micro for p in b] for step, parts in per_step.items()}


@pytest.mark.slow
def test_zero2_mixture_trains_evaluates_per_source_resumes_elastically_and_exports(sources, tmp_path):
    wt2, wiki = sources
    data = ["--data", f"wt2={wt2}:0.4", "--data", f"wiki={wiki}:0.6"]
    evals = ["--eval-every", "4", "--eval-batches", "2", "--max-steps", str(MAX_STEPS)]
    full = tmp_path / "full"
    out = probe(full, 2, *data, *evals, "--save-every", str(SAVED_AT))
    assert "eval/wt2 step 4:" in out and "eval/wiki step 8:" in out and "eval step 8:" in out, out[-3000:]
    for name in ("wt2", "wiki"):
        assert sorted(metric(full, f"eval_{name}_mlm_loss")) == [4, 8]
        assert metric(full, f"train_{name}_samples")[MAX_STEPS] > 0
    stream = global_stream(full)
    assert sorted(stream) == list(range(1, MAX_STEPS + 1)) and all(len(v) == GLOBAL_BATCH for v in stream.values())
    everything = [p for s in sorted(stream) for p in stream[s]]
    assert len(set(everything)) == len(everything) == MAX_STEPS * GLOBAL_BATCH  # first pass of both sources
    # the counts in the monitor and the checkpoint are the samples the ranks took, by source
    meta = json.loads((full / "checkpoints" / f"global_step{MAX_STEPS}" / "spanprep_trainer.json").read_text())
    for k, name in enumerate(("wiki", "wt2")):  # batches' source indices are in name order
        taken = sum(1 for s, _ in everything if s == k)
        assert meta["source_counts"][name]["samples"] == taken == metric(full, f"train_{name}_samples")[MAX_STEPS]
        assert meta["data_state"]["sources"][name]["samples"] == taken
        assert meta["source_counts"][name]["tokens"] > 100 * taken  # real rows: hundreds of tokens each

    # the step-4 checkpoint of 2 ranks, resumed on 1 rank with the --data flags in the other order: the same
    # samples, nothing repeated or skipped, and no option changed
    one = tmp_path / "one"
    resume_from(full, f"global_step{SAVED_AT}", one)
    out = probe(one, 1, *data[2:], *data[:2], *evals, "--resume")
    assert "via the universal checkpoint" in out and "accepted: run.data" not in out and "accepted: mixture" not in out
    resumed = global_stream(one)
    assert sorted(resumed) == list(range(SAVED_AT + 1, MAX_STEPS + 1))
    assert all(resumed[s] == stream[s] for s in resumed)
    meta1 = json.loads((one / "checkpoints" / f"global_step{MAX_STEPS}" / "spanprep_trainer.json").read_text())
    assert meta1["source_counts"] == meta["source_counts"]  # restored at step 4 and counted on

    # other weights: each source continues its own stream, the new proportions apply (documented rule)
    out = probe(one, 1, "--data", f"wiki={wiki}:0.1", "--data", f"wt2={wt2}:0.9", *evals[:4], "--max-steps", "10",
                "--resume", samples_only=True)  # fmt: skip
    assert "resume: option changed since the checkpoint, accepted: run.data" in out
    assert "accepted: mixture weights: samples per epoch" in out and "every source continues its own stream" in out
    assert "done: 10 steps" in out
    after = global_stream(one)
    new = [p for s in (9, 10) for p in after[s]]
    assert not set(new) & set(everything) and len(new) == 2 * GLOBAL_BATCH

    hf = tmp_path / "hf"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(one / "checkpoints"), "--out", str(hf)],
        cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (hf / "config.json").exists() and (hf / "tokenizer.json").read_bytes() == (
        wt2 / "tokenizer.json"
    ).read_bytes()


def test_sources_that_cannot_be_mixed_are_one_line_and_exit_2(sources, demo_artifact, tmp_path, main_in_process):
    wt2, wiki = sources
    base = ["--preset", "tiny", "--max-steps", "2", "--eval-every", "0", "--num-workers", "0"]

    def refused(*argv: str) -> str:
        code, err = main_in_process(*base, "--output-dir", str(tmp_path / "run"), *argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("pretrain: error: "), err
        return lines[0]

    # the sources are checked in name order (demo before wt2, wiki before wt2), whatever the order of --data
    for data in (
        ["--data", f"wt2={wt2}", "--data", f"demo={demo_artifact}"],
        ["--data", f"demo={demo_artifact}", "--data", f"wt2={wt2}"],
    ):
        err = refused(*data)
        assert f"--data wt2 ({wt2}) and --data demo ({demo_artifact}) have different tokenizers" in err
    err = refused("--data", f"wt2={wt2}", "--data", f"wiki={wiki}", "--max-seq-len", "128")
    assert f"--data wiki ({wiki}) holds rows of up to" in err and "(--max-seq-len)" in err
    short = tmp_path / "short"  # a copy that says it was built for 128-token sequences: it sets the default length
    shutil.copytree(wt2, short)
    manifest = json.loads((short / "manifest.json").read_text())
    (short / "manifest.json").write_text(json.dumps({**manifest, "max_seq_len": 128, "max_row_tokens": 126}))
    err = refused("--data", f"short={short}", "--data", f"wiki={wiki}")
    assert (
        f"--data wiki ({wiki}) holds rows of up to 510 tokens (built for max_seq_len 512), more than sequence length "
        f"128 (the max_seq_len of --data short ({short})) leaves room for (126)" in err
    )
    err = refused("--data", f"wt2={wt2}", "--data", f"wiki={wiki}", "--scheme", "noun_phrase")
    assert f"--scheme noun_phrase masks noun_phrases candidates, but --data wiki ({wiki}) was built without" in err
    err = refused("--data", str(wt2), "--samples-per-epoch", "100")
    assert "--samples-per-epoch sets the epoch of a mixture" in err
    err = refused("--data", str(wt2), "--data", str(wiki))
    assert "name every source of a mixture" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("scheme,kind", [("entity", "entities"), ("noun_phrase", "noun_phrases"), ("ngram", "ngrams")])
def test_a_scheme_needing_candidates_is_refused_on_one_artifact_without_them(
    demo_artifact, tmp_path, main_in_process, scheme, kind
):
    """As for a mixture: one artifact built without --mask-candidates would train as plain whole-word masking."""
    import torch.distributed as dist

    run = tmp_path / "run"
    code, err = main_in_process(
        "--data", str(demo_artifact), "--preset", "tiny", "--max-steps", "2", "--eval-every", "0",
        "--num-workers", "0", "--output-dir", str(run), "--scheme", scheme,
    )  # fmt: skip
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and lines == [
        f"pretrain: error: --scheme {scheme} masks {kind} candidates, but {demo_artifact} was built without them (its "
        f"manifest's candidates.kinds; pipeline --mask-candidates {kind}); rebuild it with them, or choose a scheme "
        f"without candidates"
    ], err
    assert "Traceback" not in err and not dist.is_initialized() and not (run / "checkpoints").exists()
