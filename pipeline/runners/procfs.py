"""What Linux's ``/proc`` says about processes and their TCP sockets, for the watches of
``pipeline.runners.prism_watch``. A process or socket that goes away as it is read is simply not there: every
function here finds nothing rather than raise :class:`OSError` (where there is no ``/proc``, nothing at all).
Importing it imports no Beam."""

from __future__ import annotations

import contextlib
import os

LISTENING, ESTABLISHED = "0A", "01"  # TCP states as /proc/PID/net/tcp gives them


def read(path: str) -> str:
    """The text of a ``/proc`` file; "" when it cannot be read (the process ended meanwhile)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def command(pid: int) -> str:
    """Process ``pid``'s command line, its arguments joined by spaces; "" for a zombie or an ended process."""
    return read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()


def sockets(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds (its ``/proc/PID/fd`` links ``socket:[INODE]``)."""
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    found.add(link[8:-1])
    return found


def processes() -> list[int]:
    """Every process this one can see."""
    with contextlib.suppress(OSError):
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    return []


def tcp_table(pid: int | str) -> list[tuple[str, str, str, str]]:
    """(local address:port, remote address:port, state, inode) of every TCP socket in ``pid``'s network namespace
    (``"self"``: this process's), as ``/proc/PID/net/tcp`` and ``tcp6`` give them (hex; :data:`LISTENING`,
    :data:`ESTABLISHED`)."""
    rows = []
    for name in ("tcp", "tcp6"):
        for line in read(f"/proc/{pid}/net/{name}").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9:
                rows.append((fields[1], fields[2], fields[3], fields[9]))
    return rows


def port(address: str) -> int:
    """The port of an address of :func:`tcp_table`."""
    return int(address.rsplit(":", 1)[1], 16)


def listeners(tcp_port: int) -> set[int]:
    """The processes holding a socket listening on ``tcp_port`` in this process's network namespace (other than this
    process)."""
    inodes = {inode for local, _, state, inode in tcp_table("self") if state == LISTENING and port(local) == tcp_port}
    if not inodes:
        return set()
    return {pid for pid in processes() if pid != os.getpid() and sockets(pid) & inodes}


def stat(pid: int) -> tuple[str, str] | None:
    """Process ``pid``'s state ("Z": a zombie, ended and not yet reaped) and when it started (``/proc/PID/stat``'s
    fields 3 and 22: a pid used again is another start), or None once it has been reaped."""
    text = read(f"/proc/{pid}/stat")
    fields = text[text.rfind(")") + 2 :].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def started(pid: int) -> str | None:
    """When process ``pid`` started, or None when it has ended (or is a zombie)."""
    found = stat(pid)
    return found[1] if found is not None and found[0] != "Z" else None


def children(pid: int) -> set[int]:
    """The child processes of ``pid``, zombies included (``/proc/PID/task/TID/children`` of each of its threads)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            found |= {int(child) for child in read(f"/proc/{pid}/task/{tid}/children").split()}
    return found
