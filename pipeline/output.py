"""The output of a build: refuse to write into anything non-empty, and hold a build lock meanwhile.

One mechanism for local directories and object-store prefixes: ``prepare_output`` refuses an
``--output`` that holds any file at any depth (unless ``--overwrite``), then creates
``OUTPUT/_build.lock`` *exclusively*, holding a fresh build id. The id goes into the manifest.
Before the manifest is written, ``check_lock`` makes sure the lock still holds this build's id (a
build started later with ``--overwrite`` takes the lock over, and the earlier one then fails
instead of writing a manifest over the other's files); after it, ``release_lock`` removes it. A build
that fails releases its lock too (``pipeline.runners.jobs.lock_released_on_failure``). A lock left behind means
the build was killed (or still runs): ``pipeline.verify`` reports it, and the next build refuses the
output in one line that says whose lock it is, whether that process still runs (same host), and that
``--overwrite`` clears it.

Exclusive creation is ``O_CREAT | O_EXCL`` on local disks, and on s3:// and gs:// a single upload with
the stores' preconditions (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``; ``pipeline.object_puts``).
Other Beam filesystems have no create-if-absent: there the lock is check-then-create (a small race window).

Credentials in URLs (``scheme://user:password@host/...``) are never printed or written: every
message here goes through :func:`redact_url`.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import logging
import os
import re
import socket
import uuid

from apache_beam.io.filesystems import FileSystems

from pipeline import object_puts
from pipeline.files import delete_tree
from schemas import format as fmt

log = logging.getLogger(__name__)

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s:]*:[^/@\s]*)@")


class OutputError(ValueError):
    """A location cannot be used (output not empty or locked by another build, credentials in a URL, no
    filesystem for its scheme); a user error."""


def redact_url(text: str) -> str:
    """``text`` with the ``user:password@`` part of any URL in it replaced by ``<redacted>@``."""
    return _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + "<redacted>@", text)


def has_url_credentials(text: str) -> bool:
    return bool(_URL_CREDENTIALS.search(text))


# The extra a URL scheme needs, and a module that shows whether it is installed.
_SCHEME_LIBRARIES = {
    "gs": ("google.cloud.storage", "apache-beam[gcp]"),
    "s3": ("boto3", "apache-beam[aws]"),
    "azfs": ("azure.storage.blob", "apache-beam[azure]"),
}


def check_location(option: str, url: str) -> None:
    """Refuse, before anything runs, a URL carrying credentials or needing a library that is not installed."""
    if has_url_credentials(url):
        raise OutputError(
            f"{option} {redact_url(url)}: credentials in a URL are not supported (and never written anywhere); "
            "give them through the filesystem's own options or environment"
        )
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in _SCHEME_LIBRARIES:
        module, extra = _SCHEME_LIBRARIES[scheme]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise OutputError(
                f"{option} {url}: {scheme}:// needs the cloud libraries, which are not installed (pip install '{extra}')"
            )


def is_local(path: str) -> bool:
    return "://" not in path


def existing_files(output: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` files anywhere under ``output`` (sub-folders included), relative to it."""
    root = output.rstrip("/")
    if is_local(root):
        found = []
        for directory, _, files in os.walk(root):
            for name in sorted(files):
                found.append(os.path.relpath(os.path.join(directory, name), root))
                if len(found) >= limit:
                    return found
        return found
    matched = FileSystems.match([root + "/**"])[0].metadata_list
    return sorted(m.path[len(root) + 1 :] for m in matched)[:limit]


def _lock_path(output: str) -> str:
    return f"{output.rstrip('/')}/{fmt.LOCK_FILE}"


def _create_exclusively(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; False when it already existed."""
    if is_local(path):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    if FileSystems.exists(path):
        return False
    if object_puts.supports(path):
        # One request that fails if the object appeared since the check (S3 If-None-Match: *, GCS
        # ifGenerationMatch=0), so two builds cannot both take the lock.
        return object_puts.put_object(path, data, if_absent=True, mime_type="application/json")
    with FileSystems.create(path) as f:
        f.write(data)
    return True


def read_lock(output: str) -> dict | None:
    path = _lock_path(output)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as f:
        try:
            return json.loads(f.read().decode("utf-8"))
        except ValueError:
            return {"build_id": None}


def check_output(output: str, overwrite: bool) -> list[str]:
    """Refuse ``output`` for a new build unless it is absent, empty or ``overwrite`` is given; return the files it
    holds. Changes nothing: a job calls it before it reads any data, :func:`prepare_output` again to claim it."""
    shown = redact_url(output)
    if is_local(output) and os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"--output {shown}: exists and is not a directory")
    files = existing_files(output) if FileSystems.exists(output) or not is_local(output) else []
    if files and not overwrite:
        lock = read_lock(output)
        if lock is not None:
            raise OutputError(
                f"--output {shown} is not empty: it holds {fmt.LOCK_FILE}, the lock of {describe_lock(lock)}; "
                "a build is writing there or was killed before it finished: if none runs, pass --overwrite "
                "to replace the output (lock and partial files)"
            )
        raise OutputError(
            f"--output {shown} exists and is not empty (it holds {', '.join(files[:3])}{', ...' if len(files) > 3 else ''}); pass --overwrite to replace it"
        )
    return files


def prepare_output(
    output: str, overwrite: bool, subdirs: tuple[str, ...] = (fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR)
) -> str:
    """Check and claim ``output`` for a new build, creating its ``subdirs``; return the build id.

    Raises :class:`OutputError`. The default ``subdirs`` are the artifact's; the n-gram dictionary has none.
    """
    shown = redact_url(output)
    if check_output(output, overwrite):  # files there, and --overwrite given
        lock = read_lock(output)
        if lock:
            log.warning(
                "--overwrite: %s holds the lock of %s; if that build still runs, it will fail",
                shown,
                describe_lock(lock),
            )
        delete_tree(output)
    if is_local(output):
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as e:
            raise OutputError(f"--output {shown}: cannot create it ({e.strerror})") from None
    build_id = uuid.uuid4().hex
    lock = {
        "build_id": build_id,
        "started_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    if not _create_exclusively(_lock_path(output), json.dumps(lock, sort_keys=True).encode("utf-8")):
        other = read_lock(output) or {}
        raise OutputError(
            f"--output {shown}: another build ({other.get('build_id')}) is writing there; wait for it or pass --overwrite"
        )
    for sub in subdirs:
        path = f"{output.rstrip('/')}/{sub}"
        if not FileSystems.exists(path):
            FileSystems.mkdirs(path)
    return build_id


def check_lock(output: str, build_id: str) -> None:
    """Raise :class:`OutputError` unless ``output``'s lock still belongs to build ``build_id``."""
    lock = read_lock(output)
    if lock is None or lock.get("build_id") != build_id:
        holder = "nobody (it was deleted)" if lock is None else f"build {lock.get('build_id')}"
        raise OutputError(
            f"--output {redact_url(output)}: the build lock now belongs to {holder}, not to this build ({build_id}): "
            "another build replaced this one's output, so this build writes no manifest"
        )


def finished_earlier(output: str, build_id: str, manifest_file: str, manifest: bytes | None = None) -> bool:
    """True when an earlier attempt of this build's last step already finished: the lock is released and
    ``manifest_file`` is this build's (it names ``build_id``, or, for a manifest without one, it is exactly
    ``manifest``). A runner retries that step when the worker that ran it is lost before the runner heard it
    finish; the retry must then not fail on the released lock."""
    path = f"{output.rstrip('/')}/{manifest_file}"
    if read_lock(output) is not None or not FileSystems.exists(path):
        return False
    with FileSystems.open(path) as f:
        written = f.read()
    if manifest is not None:
        return written == manifest
    try:
        return json.loads(written.decode("utf-8")).get("build_id") == build_id
    except ValueError:
        return False


def describe_lock(lock: dict) -> str:
    """Whose lock it is, for a message: build id, start, host, and on this host whether its process still runs."""
    text = f"build {lock.get('build_id')} started {lock.get('started_at')} on {lock.get('host')}"
    pid = lock.get("pid")
    if isinstance(pid, int) and lock.get("host") == socket.gethostname():
        try:
            os.kill(pid, 0)
            text += f" by process {pid}, which still runs"
        except ProcessLookupError:
            text += f" by process {pid}, which no longer runs"
        except PermissionError:
            text += f" by process {pid}, which still runs (another user's)"
    return text


def release_lock(output: str, build_id: str | None = None) -> None:
    """Remove ``output``'s lock; with ``build_id``, only while it is that build's (never another build's)."""
    if build_id is not None:
        lock = read_lock(output)
        if lock is None or lock.get("build_id") != build_id:
            return
    path = _lock_path(output)
    if FileSystems.exists(path):
        FileSystems.delete([path])
