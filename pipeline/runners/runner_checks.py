"""Runner start-up, checked before a job reads or claims anything: each problem is one :class:`UsageError` line.

Beam itself finds these problems late and reports them as 30-line tracebacks: an unknown ``--runner`` name when
the pipeline runs; a Flink or Spark job-server jar that cannot be downloaded (no network) after the output was
claimed; a ``--job_endpoint`` that nothing listens on after a 60 s wait; an ``EXTERNAL`` worker pool that is not
there as a gRPC error from the job service. :func:`check_runner` finds them in the launching process first:

- the runner name is one Beam knows (or the dotted name of a runner class that imports);
- ``PortableRunner`` has a ``--job_endpoint`` (a job service); every ``--job_endpoint`` accepts connections;
- ``FlinkRunner`` / ``SparkRunner`` without ``--job_endpoint`` start Beam's Java job server: its jar is fetched now
  (what Beam would do at run time, into the same cache), and when that fails the line says what to pass instead;
  the same for ``PrismRunner``'s binary;
- an ``EXTERNAL`` environment's worker pool (``--environment_config HOST:PORT``) accepts connections, when it is
  reachable from here: both it and the job service are on this machine's loopback (a remote runner's workers
  reach *their* ``localhost``, which this process cannot see, so that case is left to the runner).
"""

from __future__ import annotations

import json
import logging
import re
import socket

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    JobServerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineRunner, create_runner

from pipeline.runners.jobs import UsageError, runner_name
from schemas import commands

log = logging.getLogger("pipeline.runner_checks")

CONNECT_TIMEOUT_S = 10.0  # a listening service on a reachable host answers a TCP connect within this
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")


def job_service_hint() -> str:
    return (
        "a Beam job service: Flink's or Spark's job server, or "
        f"{commands.module('apache_beam.runners.portability.local_job_service_main')} --port PORT"
    )


def check_runner(options: PipelineOptions) -> None:
    """Raise :class:`UsageError` (one line) when the runner of ``options`` cannot start; see the module docstring."""
    runner = _create(options.view_as(StandardOptions).runner)
    from apache_beam.runners.portability.portable_runner import PortableRunner

    if not isinstance(runner, PortableRunner):  # FnApiRunner, DirectRunner, Dataflow: nothing to reach up front
        return
    name = runner_name(runner)
    portable = options.view_as(PortableOptions)
    endpoint = portable.job_endpoint
    if endpoint and endpoint != "embed":
        _check_listening("--job_endpoint", endpoint, f"start {job_service_hint()}, or fix the address")
    elif not endpoint and name in ("FlinkRunner", "SparkRunner"):
        _fetch_job_server_jar(name, options)
    elif not endpoint and name == "PrismRunner":
        _fetch_prism(options)
    elif not endpoint and type(runner) is PortableRunner:
        raise UsageError(f"--runner PortableRunner needs --job_endpoint HOST:PORT ({job_service_hint()})")
    if (portable.environment_type or "").upper() == "EXTERNAL":
        _check_worker_pool(portable.environment_config, endpoint, name, options)


def _create(name: str | None) -> PipelineRunner:
    try:
        return create_runner(name or "")
    except ValueError:
        known = ", ".join(n for n in StandardOptions.KNOWN_RUNNER_NAMES if not n.startswith("Test"))
        raise UsageError(
            f"--runner {name}: unknown runner; choose one of {known} (or a runner class's dotted name)"
        ) from None
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--runner {name}: cannot load it ({str(e).splitlines()[0][:200]})") from None


def _host_port(address: str) -> tuple[str, int] | None:
    match = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", address.strip())
    return (match.group(1), int(match.group(2))) if match else None


def _check_listening(option: str, address: str, what_to_do: str) -> None:
    host_port = _host_port(address)
    if host_port is None:
        raise UsageError(f"{option} {address}: not HOST:PORT")
    try:
        with socket.create_connection(host_port, timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise UsageError(f"{option} {address}: nothing accepts connections there ({reason}); {what_to_do}") from None


def _fetch_job_server_jar(name: str, options: PipelineOptions) -> None:
    """The jar of Beam's Flink/Spark job server, into Beam's jar cache (downloaded now if it is not there)."""
    from apache_beam.runners.portability import flink_runner, job_server, spark_runner

    flag = "--flink_job_server_jar" if name == "FlinkRunner" else "--spark_job_server_jar"
    server = (
        flink_runner.FlinkJarJobServer(options) if name == "FlinkRunner" else spark_runner.SparkJarJobServer(options)
    )
    try:
        url = server.path_to_jar()
    except ValueError:
        given = options.view_as(FlinkRunnerOptions if name == "FlinkRunner" else SparkRunnerOptions)
        jar_option = given.flink_job_server_jar if name == "FlinkRunner" else given.spark_job_server_jar
        raise UsageError(f"{flag} {jar_option}: no such file (give a local path to the jar or a URL)") from None
    beam_log = logging.getLogger("apache_beam.utils.subprocess_server")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # its multi-line "downloading dependencies at runtime" warning, twice
    try:
        jar = job_server.JavaJarJobServer.local_jar(url, options.view_as(JobServerOptions).jar_cache_dir)
    except (RuntimeError, OSError) as e:
        found = re.search(r"<urlopen error ([^>]*)>", str(e))
        reason = found.group(1) if found else str(e).splitlines()[0][:200]
        raise UsageError(
            f"--runner {name} starts Beam's Java job server, whose jar {url} cannot be downloaded here ({reason}); "
            f"pass {flag} PATH (a local copy of that jar) or --job_endpoint HOST:PORT (a running job server)"
        ) from None
    finally:
        beam_log.setLevel(level)
    log.info("%s: Beam's job server jar %s", name, jar)


def _fetch_prism(options: PipelineOptions) -> None:
    """Beam's Prism runner binary, into Beam's cache (downloaded now from GitHub if it is not there); where that is not
    possible and ``--prism_location`` was not given, the binary ``make prism`` built in this checkout
    (``pipeline/runners/prism.py``), which then becomes the job's ``--prism_location``."""
    from apache_beam.options.pipeline_options import PrismRunnerOptions
    from apache_beam.runners.portability import prism_runner

    from pipeline.runners import prism

    given = options.view_as(PrismRunnerOptions).prism_location
    server = prism_runner.PrismJobServer(options)
    beam_log = logging.getLogger("apache_beam.runners.portability.prism_runner")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # "Downloading prism from ...", before the download fails here
    try:
        binary = server._get_executable_path()  # what Beam calls when the pipeline runs (Beam 2.77)
    except (RuntimeError, OSError, ValueError) as e:
        built = None if given else prism.built_binary()
        if built is not None:
            options.view_as(PrismRunnerOptions).prism_location = str(built)
            log.info("PrismRunner: Beam cannot download Prism here; the binary `make prism` built: %s", built)
            return
        found = re.search(r"(https?://\S+?):? <urlopen error ([^>]*)>", str(e))
        what = f"{found.group(1)} ({found.group(2)})" if found else f"({str(e).splitlines()[0][:200]})"
        hint = "" if given else f", or build it once with Go: `make prism` (into {prism.checkout_binary()})"
        raise UsageError(
            f"--runner PrismRunner starts Beam's Prism runner, whose binary cannot be fetched here: {what}; "
            f"pass --prism_location PATH (a local copy of the binary or its zip) or --job_endpoint HOST:PORT{hint}"
        ) from None
    finally:
        beam_log.setLevel(level)
    log.info("PrismRunner: Beam's Prism binary %s", binary)


def _runs_workers_here(endpoint: str | None, name: str, options: PipelineOptions) -> bool:
    """Whether the runner's SDK workers run on this machine (so its loopback is the workers' loopback)."""
    if endpoint:
        host_port = _host_port(endpoint)
        return endpoint == "embed" or (host_port is not None and host_port[0] in LOOPBACK_HOSTS)
    if name == "FlinkRunner":
        return options.view_as(FlinkRunnerOptions).flink_master in ("[local]", "[auto]")
    if name == "SparkRunner":
        return options.view_as(SparkRunnerOptions).spark_master_url.startswith("local")
    return False


def _check_worker_pool(config: str | None, endpoint: str | None, name: str, options: PipelineOptions) -> None:
    if not config:
        raise UsageError(
            "--environment_type EXTERNAL needs --environment_config HOST:PORT of a Beam worker pool "
            f"({commands.module('pipeline.worker_pool')} --service_port PORT)"
        )
    address = config
    if config.lstrip().startswith("{"):
        try:
            address = str(json.loads(config)["url"])
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"--environment_config {config}: neither HOST:PORT nor JSON with a 'url'") from None
    host_port = _host_port(address)
    if host_port is None or host_port[0] not in LOOPBACK_HOSTS or not _runs_workers_here(endpoint, name, options):
        return  # the worker pool is reached from the runner's machines, not from here
    _check_listening(
        "--environment_config",
        address,
        f"start the Beam worker pool there ({commands.module('pipeline.worker_pool')} --service_port {host_port[1]}) "
        "or use --environment_type LOOPBACK",
    )
