"""Real object-store API servers on loopback for tests: S3 (``moto_server``) and GCS (``gcp-storage-emulator``).

Each server is a child process bound to 127.0.0.1 on a free port; :func:`start_s3` / :func:`start_gcs`
wait until it answers, create a bucket through the store's own API and return a :class:`Store` that
knows how every component reaches it the standard way:

- S3: ``AWS_ENDPOINT_URL`` (boto3/botocore, s3fs, pyarrow's S3FileSystem), dummy
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` (Beam's S3 filesystem reads them
  through boto3 too); Beam's own ``--s3_endpoint_url`` in ``Store.beam_args``.
- GCS: ``STORAGE_EMULATOR_HOST`` (google-cloud-storage, hence Beam's GcsIO; gcsfs), and pyarrow's
  ``GcsFileSystem(endpoint_override=, scheme="http", anonymous=True)``.

:data:`NO_CLOUD_METADATA` points every cloud SDK's instance-metadata lookup at a closed loopback port, so a
client that falls back to "default credentials" fails fast here instead of sending traffic off the machine.
The fixtures ``s3_store``, ``gcs_store`` (session-scoped servers) and ``object_store`` (each store in turn)
are at the end; ``tests/conftest.py`` loads this module as a pytest plugin.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs
import pytest

# Any metadata-server probe goes to a closed loopback port (discard), never to 169.254.169.254,
NO_CLOUD_METADATA = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_GCE_CHECK": "true",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
    "GCE_METADATA_ROOT": "127.0.0.1:9",
    # and requests to the servers never go through an HTTP proxy the machine may have configured
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for loopback requests

_READY_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_answering(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{process.args[:3]} exited with {process.returncode} before serving {url}:\n{log.read_text()[-2000:]}"
            )
        try:
            _DIRECT.open(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # an HTTP answer (even 4xx) means the server is up
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{url} did not answer within {_READY_TIMEOUT_S:.0f} s:\n{log.read_text()[-2000:]}")


@dataclass
class Store:
    """A running object-store server with one bucket."""

    scheme: str  # "s3" or "gs"
    endpoint: str  # http://127.0.0.1:PORT
    bucket: str
    process: subprocess.Popen
    log: Path
    env: dict[str, str] = field(default_factory=dict)  # what a child process needs to reach the store
    beam_args: list[str] = field(default_factory=list)  # Beam pipeline options for the store

    @property
    def host_port(self) -> str:
        return self.endpoint.split("://", 1)[1]

    def uri(self, *parts: str) -> str:
        """``s3://bucket/part/...`` or ``gs://bucket/part/...``."""
        return "/".join([f"{self.scheme}://{self.bucket}", *(p.strip("/") for p in parts if p)])

    def child_env(self) -> dict[str, str]:
        """``os.environ`` plus what reaches this store (for ``subprocess``)."""
        return {**os.environ, **self.env}

    def pyarrow_fs(self) -> pafs.FileSystem:
        """pyarrow's own filesystem for the store, endpoint given explicitly."""
        if self.scheme == "s3":
            return pafs.S3FileSystem(
                access_key=self.env["AWS_ACCESS_KEY_ID"],
                secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                region=self.env["AWS_DEFAULT_REGION"],
                endpoint_override=self.endpoint,
                scheme="http",
                allow_bucket_creation=False,
            )
        return pafs.GcsFileSystem(anonymous=True, endpoint_override=self.host_port, scheme="http", project_id="test")

    @property
    def storage_options(self) -> dict:
        """fsspec ``storage_options`` (s3fs / gcsfs) for the store, as ``datasets`` takes them."""
        if self.scheme == "s3":
            return {
                "key": self.env["AWS_ACCESS_KEY_ID"],
                "secret": self.env["AWS_SECRET_ACCESS_KEY"],
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": self.env["AWS_DEFAULT_REGION"]},
            }
        return {"token": "anon", "endpoint_url": self.endpoint, "project": "test"}

    def upload_tree(self, local: Path, prefix: str) -> str:
        """Copy every file under ``local`` to ``prefix`` in the bucket (through pyarrow); returns the URI."""
        fs = self.pyarrow_fs()
        local = Path(local)
        files = sorted(p for p in local.rglob("*") if p.is_file())
        assert files, f"nothing to upload under {local}"
        for p in files:
            key = f"{self.bucket}/{prefix.strip('/')}/{p.relative_to(local).as_posix()}"
            with fs.open_output_stream(key) as out:
                out.write(p.read_bytes())
        return self.uri(prefix)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _die_with_parent() -> None:
    """In the server's child process: ask Linux to SIGTERM it when the test process dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: Store.stop() still ends it


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **NO_CLOUD_METADATA},
            preexec_fn=_die_with_parent,
        )


def start_s3(workdir: Path, bucket: str = "spanprep-test") -> Store:
    """``moto_server`` (S3 REST API) on 127.0.0.1 with ``bucket`` created through boto3."""
    import boto3

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = Path(workdir) / "moto_server.log"
    process = _spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log)
    _wait_until_answering(f"{endpoint}/moto-api/", process, log)
    env = {
        **NO_CLOUD_METADATA,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    store = Store(
        scheme="s3",
        endpoint=endpoint,
        bucket=bucket,
        process=process,
        log=log,
        env=env,
        # Credentials stay in the environment (a manifest records the command line); boto3 would also find the
        # endpoint there, the option shows Beam's own way.
        beam_args=[f"--s3_endpoint_url={endpoint}"],
    )
    try:
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=bucket)
    except BaseException:
        store.stop()
        raise
    return store


def write_emulator_credentials(path: Path) -> Path:
    """An Application Default Credentials file for a GCS emulator: an ``authorized_user`` entry holding an access
    token that never expires, so google.auth resolves it from the file at once and never asks a token server.
    The emulator ignores the bearer token it is sent (a real bucket would refuse it: RUNNING.md says what users
    give instead)."""
    info = {
        "type": "authorized_user",
        "client_id": "spanprep-gcs-emulator",
        "client_secret": "unused",
        "refresh_token": "unused",
        "token": "emulator",
        "expiry": "2999-01-01T00:00:00Z",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    return path


def start_gcs(workdir: Path, bucket: str = "spanprep-test") -> Store:
    """``gcp-storage-emulator`` (GCS JSON API, in memory) on 127.0.0.1 with ``bucket`` created through the API."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = Path(workdir) / "gcp_storage_emulator.log"
    argv = [
        sys.executable,
        "-m",
        "gcp_storage_emulator",
        "start",
        "-H",
        "127.0.0.1",
        "--port",
        str(port),
        "--in-memory",
    ]
    process = _spawn(argv, log)
    _wait_until_answering(f"{endpoint}/storage/v1/b?project=test", process, log)
    env = {
        **NO_CLOUD_METADATA,
        "STORAGE_EMULATOR_HOST": endpoint,
        "GOOGLE_CLOUD_PROJECT": "test",
        # Beam's GcsIO asks google.auth for Application Default Credentials first and, finding none, retries
        # 4 times with backoff (~30 s per process) before it connects anonymously; these resolve at once.
        "GOOGLE_APPLICATION_CREDENTIALS": str(write_emulator_credentials(Path(workdir) / "emulator-credentials.json")),
        # gcsfs >= 2026.10 asks the storage-control gRPC API (over TLS) for the bucket type, which the emulator
        # does not serve: a 60 s timeout per call; off, it uses the JSON API only.
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    store = Store(
        scheme="gs", endpoint=endpoint, bucket=bucket, process=process, log=log, env=env, beam_args=["--project=test"]
    )
    try:
        request = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        _DIRECT.open(request, timeout=10).close()
    except BaseException:
        store.stop()
        raise
    return store


# -- pytest fixtures (loaded by tests/conftest.py through ``pytest_plugins``) ---------------------------------
@pytest.fixture(scope="session")
def s3_store(tmp_path_factory) -> Iterator[Store]:
    """A ``moto_server`` S3 API server on 127.0.0.1 with an empty bucket; stopped after the session."""
    store = start_s3(tmp_path_factory.mktemp("s3-server"))
    yield store
    store.stop()


@pytest.fixture(scope="session")
def gcs_store(tmp_path_factory) -> Iterator[Store]:
    """A ``gcp-storage-emulator`` GCS JSON API server on 127.0.0.1 with an empty bucket; stopped after the session."""
    store = start_gcs(tmp_path_factory.mktemp("gcs-server"))
    try:
        _check_pyarrow_reaches(store)
    except BaseException:
        store.stop()
        raise
    yield store
    store.stop()


def _check_pyarrow_reaches(store: Store, timeout: float = 60) -> None:
    """Fail fast, not hang: pyarrow does not read STORAGE_EMULATOR_HOST itself, and a gs:// URI it opens with
    Google default credentials retries for many minutes. spanprep's URI -> filesystem function must pass the
    variable as endpoint_override; check that once, in a child process with a time limit."""
    code = "from schemas.artifact import Artifact\ntry:\n    Artifact.open(%r)\nexcept Exception as e:\n    print(e)\n"
    repo = Path(__file__).resolve().parents[2]
    env = {**store.child_env(), "PYTHONPATH": str(repo)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code % store.uri("no-such-artifact")],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"opening gs:// with STORAGE_EMULATOR_HOST={store.endpoint} did not answer within {timeout:.0f} s: the "
            "artifact's URI -> filesystem function must give STORAGE_EMULATOR_HOST to pyarrow as endpoint_override"
        )
    assert "does not exist" in done.stdout, done.stdout + done.stderr


@pytest.fixture(params=["s3", "gs"])
def object_store(request, monkeypatch) -> Store:
    """Each store in turn, with its endpoint variables set in ``os.environ`` for the test (in-process readers
    find the store the standard way); use ``store.child_env()`` for subprocesses."""
    store = request.getfixturevalue("s3_store" if request.param == "s3" else "gcs_store")
    if store.process.poll() is not None:
        pytest.fail(f"the {request.param} server died (exit {store.process.returncode}); log: {store.log}")
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)
    return store
