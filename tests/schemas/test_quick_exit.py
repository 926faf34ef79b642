"""schemas.quick_exit: the exit code, flushed output and atexit handlers are kept, the interpreter teardown is
skipped, and a running non-daemon thread is still waited for (then the normal exit happens)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import atexit, logging, sys, threading, time
    from schemas.quick_exit import quick_exit

    class Teardown:
        def __del__(self):
            print("torn down", flush=True)

    kept_until_teardown = Teardown()  # a module global: only the interpreter teardown deletes it
    atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    logging.info("logged")
    sys.stdout.write("unflushed stdout")  # no newline, not flushed: quick_exit must flush it
    if sys.argv[2] == "thread":
        threading.Thread(target=lambda: (time.sleep(0.5), print("thread done", flush=True))).start()
    quick_exit(int(sys.argv[3]))
""")


def run(tmp_path: Path, mode: str, code: int) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / f"atexit-{mode}-{code}"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(marker), mode, str(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, marker


def test_exit_code_output_and_atexit_kept_teardown_skipped(tmp_path):
    for code in (0, 3):
        proc, marker = run(tmp_path, "plain", code)
        assert proc.returncode == code, proc.stderr
        assert proc.stdout == "unflushed stdout"  # flushed, and no "torn down": the teardown did not run
        assert "INFO:root:logged" in proc.stderr
        assert marker.read_text() == "atexit ran"


def test_a_running_non_daemon_thread_gets_the_normal_exit(tmp_path):
    proc, marker = run(tmp_path, "thread", 4)
    assert proc.returncode == 4, proc.stderr
    assert "thread done" in proc.stdout and "torn down" in proc.stdout  # waited for the thread, then the teardown
    assert marker.read_text() == "atexit ran"
