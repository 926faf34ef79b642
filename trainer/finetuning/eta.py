"""Elapsed time and ETA for the fine-tuning step lines printed where stderr is no terminal (a log file, CI)."""

from __future__ import annotations


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def elapsed_and_eta(elapsed: float, done: int, total: int) -> str:
    """``elapsed 1:02, ETA 3:10``: the time left at the mean pace of the ``done`` steps so far."""
    left = elapsed / done * (total - done) if done else 0.0
    return f"elapsed {clock(elapsed)}, ETA {clock(left)}"
