"""One convention for the two Beam jobs (``build_shards`` and ``build_ngram_dictionary``).

Both jobs take their options the same way and fail the same way: a problem with the user's options or
inputs is a :class:`UsageError`, which ``main()`` prints as one line ``<job>: error: <message>`` on stderr
before it exits with status 2 (:func:`exit_code`); never a traceback. Both run on :data:`DEFAULT_RUNNER`
unless ``--runner`` says otherwise, match ``--input`` with :func:`match_inputs`, claim ``--output`` with
:func:`prepare_output` (the guard and build lock of ``pipeline.output``: a non-empty output needs
``--overwrite``; the artifact's manifest records the lock's build id, the dictionary's manifest stays
byte-identical from build to build), and log with :func:`configure_logging`.

Importing ``pipeline`` does nothing; importing this module does two things, on purpose. Beam logs "apitools
not found ..." on the root logger *while it is imported* when its GCP extras are absent (not our users'
concern), so the filter that hides it goes onto the root logger here, before this module imports Beam, and
the job modules import this module before Beam. And it imports Beam as if pandas were not installed (see
below), for the same reason of import order.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator


class _QuietBeamImportWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in str(record.msg)


if not any(isinstance(f, _QuietBeamImportWarning) for f in logging.getLogger().filters):
    logging.getLogger().addFilter(_QuietBeamImportWarning())


# pandas is not a dependency of the jobs (it comes with the `hf` extra's `datasets`) and they never handle pandas
# objects, yet when it is installed two libraries import it (0.45 s) in every job process: Beam while it is
# imported, to register pandas type conversions, and pyarrow's C++ conversions (the first ``to_numpy`` or untyped
# ``pa.array``), to recognise pandas values. So Beam is imported here, and the jobs' ``main()`` runs
# (:func:`exit_code`), as on an install without pandas. Beam's runners (Dataflow, Flink, Spark, portable) do not
# import it; pandas stays importable outside the block (Beam's DataFrame API imports it when used). The local
# runner's worker processes do the same (pipeline/runners/sdk_worker.py, where without_pandas lives: it imports no Beam).
from pipeline.runners.sdk_worker import without_pandas  # noqa: E402

with without_pandas():
    import apache_beam as beam
    from apache_beam.io.filesystem import BeamIOError
    from apache_beam.io.filesystems import FileSystems

from pipeline import output, progress  # noqa: E402
from pipeline.runners import lost_workers, prism_watch, sdk_worker  # noqa: E402
from pipeline.runners.state_cache import in_process_state_cache  # noqa: E402
from schemas import format as fmt  # noqa: E402

sdk_worker.shorten_state_sampling()  # for the bundles the in-process runner runs here

DEFAULT_RUNNER = "FnApiRunner"  # in-process; the DirectRunner may try to download a runner binary
# Runners whose workers run on this machine (with this machine's packages and files).
LOCAL_RUNNERS = (
    "FnApiRunner",
    "DirectRunner",
    "BundleBasedDirectRunner",
    "SwitchingDirectRunner",
    "PortableRunner",
    "PrismRunner",
)

# Names of options whose values are secrets (Beam's --s3_secret_access_key, --s3_session_token,
# --azure_connection_string, ...). Only these: --tokenizer or --vocab-size are not secrets.
SECRET_OPTION = re.compile(
    r"secret|password|passwd|session_token|access_token|auth_token|api_key|access_key|credential|connection_string",
    re.IGNORECASE,
)


class UsageError(Exception):
    """A problem with the user's options or inputs; reported as one line without a traceback (exit 2)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The jobs' ``--help``: the description as written, and each option's default after its help, unless the help
    names it already or there is none (None, False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or "default" in text.lower() or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class JobFailed(Exception):
    """The job ran but its work failed (every document dead-lettered); reported as one line (exit 1)."""


class WorkerLost(Exception):
    """The runner lost a worker process under a bundle and the job failed without writing its manifest; reported
    as one line without a traceback (exit 1)."""


# What Beam's runners raise when an SDK worker process dies under a bundle (killed, out of memory); the last two are
# Prism's ("bundle inst030 stage-028 failed:SDK worker disconnected: worker[...], 4 active instructions, ...", and
# "prism worker[...] didn't get control connection to localhost:PORT after 1m0s" for one that died as it started).
_LOST_WORKER = re.compile(
    r"Channel closed prematurely|Worker subprocess exited with return code|Socket closed|SDK worker disconnected"
    r"|didn't get control connection"
)


def exit_code(job: str, run: Callable[[], object]) -> int:
    """Call ``run()`` (without pandas, see above); 0 when it returns, 2 after one ``<job>: error:`` line for a user
    error, 1 for a bad artifact, a job whose work failed or a lost worker."""
    try:
        with without_pandas():
            run()
    except (UsageError, JobFailed, fmt.FormatError, WorkerLost) as e:
        print(f"{job}: error: {e}".encode(errors="backslashreplace").decode(), file=sys.stderr)  # a name not UTF-8
        return 2 if isinstance(e, UsageError) else 1
    return 0


class _StderrHandler(logging.StreamHandler):
    """Looks ``sys.stderr`` up when it writes, so a job's ``main()`` called from a test (which swaps
    sys.stderr) never leaves a handler pointing at a closed stream."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


class _QuietServiceChatter(logging.Filter):
    """Drops Beam's "Really starting service at ..." and "Really destroying service at ..." warnings (a local job
    server such as Prism's, started and stopped by the runner as it should be), which came after a job's summary."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "apache_beam.utils.subprocess_server" and str(record.msg).startswith("Really "))


def configure_logging(level: int | None = None) -> None:
    """INFO-level progress lines on stderr for the command-line jobs, Beam's own chatter at WARNING."""
    handler = _StderrHandler()
    handler.addFilter(_QuietServiceChatter())
    handler.setFormatter(logging.Formatter(sdk_worker.LOG_FORMAT))
    logging.basicConfig(level=logging.INFO if level is None else level, handlers=[handler], force=True)
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the values of secret options and the credentials of URLs hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
        elif arg.startswith("--") and SECRET_OPTION.search(arg.split("=", 1)[0].replace("-", "_")):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=<redacted>")
            else:
                out.append(arg)
                hide_next = True
        else:
            out.append(output.redact_url(arg))
    return out


def stray_words(options) -> list[str]:
    """The words of ``options``' command line that are neither an option nor an option's value (``build_shards ...
    foo``, or a second file after ``--input a.jsonl``). Beam's options ignore them; every job refuses them
    (:func:`refuse_stray_words`). A word after an option that neither the job nor Beam knows is taken as that
    option's value, as Beam takes it (a job that passes unknown options to the runner)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(options._flags)  # pylint: disable=protected-access
    words, i = [], 0
    while i < len(unknown):
        arg = unknown[i]
        if arg.startswith("--") and "=" not in arg and i + 1 < len(unknown) and not unknown[i + 1].startswith("-"):
            i += 2  # an unknown option and its value
            continue
        if not arg.startswith("-"):
            words.append(arg)
        i += 1
    return words


def refuse_stray_words(options) -> None:
    """:class:`UsageError` naming the stray words of ``options``' command line (:func:`stray_words`), if any."""
    words = stray_words(options)
    if words:
        raise UsageError(
            f"stray word(s) on the command line: {' '.join(words)} (not an option or an option's value; every "
            "option starts with --, and --input takes one file or glob: repeat it for several; see --help)"
        )


def check_location(option: str, url: str) -> None:
    """:func:`pipeline.output.check_location` as a :class:`UsageError`."""
    try:
        output.check_location(option, url)
    except output.OutputError as e:
        raise UsageError(str(e)) from None


def _first_line(error: Exception) -> str:
    return output.redact_url(str(error)).splitlines()[0][:300]


def match_inputs(patterns: list[str], example: str = "*.jsonl") -> list[tuple[str, int]]:
    """Every file the ``--input`` patterns match, sorted and de-duplicated, with its size in bytes.

    :class:`UsageError` when a pattern matches no file, names a directory (``example`` shows the glob to
    give instead), cannot be listed, or carries credentials.
    """
    for pattern in patterns:
        check_location("--input", pattern)
    found: dict[str, int] = {}
    for pattern in patterns:
        try:
            result = FileSystems.match([pattern])[0]
        except (BeamIOError, ValueError) as e:
            raise UsageError(f"--input {pattern}: cannot list it ({_first_line(e)})") from None
        files = {}
        for m in result.metadata_list:
            if "://" not in m.path and os.path.isdir(m.path):
                if m.path.rstrip("/") == pattern.rstrip("/"):
                    raise UsageError(
                        f"--input {pattern}: is a directory; give its files, e.g. --input '{pattern.rstrip('/')}/{example}'"
                    )
                continue  # a glob such as dir/* also matches sub-directories: they hold no records themselves
            if re.search("[\udc80-\udcff]", m.path):  # bytes not UTF-8, escaped (os.fsdecode): no JSON can name it
                raise UsageError(f"--input {pattern}: the file name {m.path!r} is not UTF-8: rename the file")
            files[m.path] = m.size_in_bytes
        if not files:
            raise UsageError(f"--input {pattern}: no file matches")
        found.update(files)
    return sorted(found.items())


def check_output(url: str, overwrite: bool) -> None:
    """Before any data is read: refuse a non-empty ``url`` without --overwrite (``output.check_output``)."""
    check_location("--output", url)
    try:
        output.check_output(url, overwrite)
    except output.OutputError as e:
        raise UsageError(str(e)) from None
    except (BeamIOError, ValueError, OSError) as e:
        raise UsageError(f"--output {output.redact_url(url)}: cannot use it ({_first_line(e)})") from None


def prepare_output(url: str, overwrite: bool, subdirs: tuple[str, ...] = ()) -> str:
    """Claim ``url`` for this build (refusing any non-empty one without --overwrite); return the build id."""
    check_location("--output", url)
    try:
        return output.prepare_output(url, overwrite, subdirs)
    except output.OutputError as e:
        raise UsageError(str(e)) from None
    except (BeamIOError, ValueError, OSError) as e:
        raise UsageError(f"--output {output.redact_url(url)}: cannot use it ({_first_line(e)})") from None


@contextlib.contextmanager
def lock_released_on_failure(url: str, build_id: str) -> Iterator[None]:
    """Inside the block, any failure (an exception, Ctrl-C) releases ``url``'s build lock if it is still this
    build's, then propagates: a failed build never leaves a lock that blocks the next one. (A killed process
    cannot release it: the next build then says whose lock it is and that --overwrite clears it.)"""
    try:
        yield
    except BaseException:
        try:
            output.release_lock(url, build_id)
        except Exception as e:  # the build's own error matters more than the lock's
            logging.getLogger(__name__).warning("could not release the build lock of %s: %s", url, _first_line(e))
        raise


def runner_name(runner) -> str:
    """The runner's class name, whether ``--runner`` gave a name (also dotted) or a runner object."""
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.split(".")[-1]


def local_cores_per_worker(options) -> int:
    """Cores of this machine (those the process may use) per local worker (``--direct_num_workers``; 0 = one per core)."""
    from apache_beam.options.pipeline_options import DirectOptions

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = options.view_as(DirectOptions).direct_num_workers or cores
    return max(1, cores // workers)


def apply_log_level(options) -> None:
    """``--log-level``: this process's loggers (ours and Beam's) at that level; see :func:`worker_logging`."""
    level = options.view_as(progress.ProgressOptions).log_level
    if level:
        logging.getLogger().setLevel(level)
        for noisy in ("apache_beam", "absl"):
            logging.getLogger(noisy).setLevel(level)


def worker_logging(options) -> None:
    """Beam's SDK workers log at WARNING (their INFO is start-up chatter: ~25 lines a worker process), this project's
    loggers at INFO, unless ``--log-level`` or Beam's own ``--default_sdk_harness_log_level`` say otherwise."""
    from apache_beam.options.pipeline_options import WorkerOptions

    level = options.view_as(progress.ProgressOptions).log_level
    sdk = options.view_as(WorkerOptions)
    if sdk.default_sdk_harness_log_level is None:
        sdk.default_sdk_harness_log_level = level or "WARNING"
    overrides = {"pipeline": level or "INFO"}
    if level is None:  # "No semi_persistent_directory found", logged as a warning by every worker of a local run
        overrides["__main__"] = "ERROR"  # Beam's worker module, when it runs as python -m (portable runners)
        overrides["apache_beam.runners.worker.sdk_worker_main"] = "ERROR"  # the same, run by pipeline.sdk_worker
    sdk.sdk_harness_log_level_overrides = {**overrides, **(sdk.sdk_harness_log_level_overrides or {})}


def _runner_for(options):
    """The runner of ``options``; for the FnApiRunner's worker processes (``multi_processing``), one that hands them
    the options that set their logging (the FnApiRunner gives its worker processes no pipeline options) and starts
    them as ``pipeline.sdk_worker`` (the jobs' log format, without Beam's two start-up lines)."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions, WorkerOptions

    runner = options.view_as(StandardOptions).runner
    if runner_name(runner) != "FnApiRunner" or options.view_as(DirectOptions).direct_running_mode != "multi_processing":
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.job import utils as job_utils
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo

    sdk = options.view_as(WorkerOptions)
    worker_options = {
        "beam:option:default_sdk_harness_log_level:v1": sdk.default_sdk_harness_log_level,
        "beam:option:sdk_harness_log_level_overrides:v1": sdk.sdk_harness_log_level_overrides,
    }
    info = beam_provision_api_pb2.ProvisionInfo(
        retrieval_token="unused-retrieval-token", pipeline_options=job_utils.dict_to_struct(worker_options)
    )

    class FnApiRunnerWithOurWorkers(FnApiRunner):
        """Its worker processes run ``pipeline.sdk_worker`` (:func:`_worker_command`)."""

        def run_via_runner_api(self, pipeline_proto, options):
            return super().run_via_runner_api(_worker_command(pipeline_proto), options)

    return FnApiRunnerWithOurWorkers(provision_info=ExtendedProvisionInfo(info))


BEAM_WORKER_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"  # the FnApiRunner's


def _worker_command(pipeline_proto):
    """``pipeline_proto`` with its local worker processes started by ``pipeline.sdk_worker`` instead of Beam's
    module (the same worker, with the jobs' log format and a quiet start-up)."""
    from apache_beam.portability import python_urns

    for env in pipeline_proto.components.environments.values():
        if env.urn == python_urns.SUBPROCESS_SDK and env.payload == BEAM_WORKER_COMMAND.encode():
            env.payload = f"{sys.executable} -m pipeline.sdk_worker".encode()
    return pipeline_proto


class _QuietUserErrors(logging.Filter):
    """Drops Beam's logs of a step that raised one of ``sdk_worker.ONE_LINE_ERRORS`` (with its traceback), in this
    process or relayed from a worker process: the job reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if sdk_worker.shows_one_line_error(record):
            return False
        message = record.getMessage()  # a worker's log as the local job service relays it: its text, escaped
        return not (message.startswith("Worker:") and any(n + ": " in message for n in sdk_worker.ONE_LINE_ERRORS))


_BEAM_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                 "apache_beam.runners.portability.local_job_service")  # fmt: skip


def one_line_error(e: BaseException) -> str | None:
    """The message of one of ``sdk_worker.ONE_LINE_ERRORS`` raised in a step, from ``e`` as the runner raised it: the
    exception itself (this process) or Beam's RuntimeError holding a worker's traceback; None when it is not one."""
    kind = type(e)
    if f"{kind.__module__}.{kind.__qualname__}" in sdk_worker.ONE_LINE_ERRORS:
        return str(e).split(" [while running")[0]
    names = "|".join(re.escape(name) for name in sdk_worker.ONE_LINE_ERRORS)
    found = re.search(rf"(?:{names}): (.+)", str(e))
    return found.group(1).split(" [while running")[0].strip() if found else None


def run_pipeline(
    options,
    build: Callable[[beam.Pipeline], None],
    total_bytes: int | None = None,
    unit: str = "documents",
) -> None:
    """Build the job's pipeline with ``build(p)`` and run it to the end. A step's exception of
    ``sdk_worker.ONE_LINE_ERRORS`` (a bad input: the caller or this function turns it into one line) is not logged
    with its traceback, in this process or a worker's.

    Its workers log as :func:`worker_logging` says; on local runners a line every ``--progress-seconds`` tells how
    much of the input's ``total_bytes`` (when known) has been read (``pipeline/progress.py``).
    The writer of the last file checks that the output's build lock is still this build's; when another
    build has taken the output over (``--overwrite``), that is this job's :class:`UsageError`.
    """
    from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

    worker_logging(options)
    local = runner_name(options.view_as(StandardOptions).runner) in ("FnApiRunner", "DirectRunner")
    runner = _runner_for(options)
    quiet = _QuietUserErrors()
    for name in _BEAM_LOGGERS:
        logging.getLogger(name).addFilter(quiet)
    on_prism = runner_name(options.view_as(StandardOptions).runner) == "PrismRunner"
    portable = options.view_as(PortableOptions)  # an EXTERNAL job's worker pool: its children are watched too
    prism = prism_watch.PrismWatch(prism_watch.pool_address(portable.environment_type, portable.environment_config))
    try:
        with (
            progress.reporting(options, total_bytes, local, unit),
            lost_workers.stop_the_job(runner is not None),
            prism_watch.watch_prism(on_prism, prism),
        ):
            with in_process_state_cache(options), beam.Pipeline(runner=runner, options=options) as p:
                build(p)
    except Exception as e:
        message = one_line_error(e)  # a bad input a step refused: the output location, an evaluation file
        if message:
            raise UsageError(message) from None
        reason = prism.explains(e) if on_prism else None
        if not (reason or _LOST_WORKER.search(str(e))):
            raise
        raise WorkerLost(
            f"the runner lost a worker process and the job failed ({reason or _first_line(e)}); it wrote no manifest, so "
            "the output is an incomplete build that pipeline.verify rejects: rerun with --overwrite"
        ) from None
    finally:
        for name in _BEAM_LOGGERS:
            logging.getLogger(name).removeFilter(quiet)
