"""What an artifact directory holds, listed without following a single link: ``pipeline.verify``'s view of the files.

An artifact holds regular files and directories only. A symbolic link (to a file, a directory, ``/``, itself, or
nowhere) or a special file (named pipe, socket, device) inside it is listed as such and never followed or opened:
following ``dead_letter/root -> /`` made verify walk ``/proc`` (issue 21). Only local filesystems have links; object
stores are listed with ``pyarrow.fs`` as before.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from schemas import format as fmt


def shown(relative: str) -> str:
    """A name found on disk, safe to print on one line (a newline or an undecodable byte in a file name is escaped)."""
    return relative if relative.isprintable() else repr(relative)


@dataclass
class Listing:
    """The artifact's entries by relative path (``shards/part-00000-of-00004.arrow``)."""

    files: dict[str, int] = field(default_factory=dict)  # regular files and their sizes
    directories: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)  # symbolic links, never followed
    special: list[str] = field(default_factory=list)  # named pipes, sockets, devices, never opened
    unlistable: list[tuple[str, str]] = field(default_factory=list)  # (directory, why) that could not be listed

    def blocked(self, relative: str) -> bool:
        """``relative`` is a link or special file, or lies under a link: it is reported as such, never opened."""
        bad = set(self.links) | set(self.special)
        parts = relative.split("/")
        return any("/".join(parts[: i + 1]) in bad for i in range(len(parts)))

    def problems(self) -> list[str]:
        """One line per link, special file and unlistable directory."""
        out = [
            f"{shown(r)}: a symbolic link; verify never follows links and an artifact holds regular files only "
            f"(replace the link by the file it names, or remove it)"
            for r in self.links
        ]
        out += [
            f"{shown(r)}: not a regular file (a named pipe, socket or device); verify does not open it"
            for r in self.special
        ]
        out += [f"{shown(d)}: directory cannot be listed: {why}" for d, why in self.unlistable]
        return out


def _list_local(root: str) -> Listing:
    listing = Listing()
    if not os.path.isdir(root):
        return listing  # Artifact.open says what is missing
    pending = [""]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(os.path.join(root, directory) if directory else root) as it:
                entries = list(it)
        except OSError as e:
            listing.unlistable.append((directory or ".", e.strerror or type(e).__name__))
            continue
        for entry in entries:
            relative = f"{directory}/{entry.name}" if directory else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as e:
                listing.unlistable.append((relative, e.strerror or type(e).__name__))
                continue
            if stat.S_ISLNK(info.st_mode):
                listing.links.append(relative)
            elif stat.S_ISDIR(info.st_mode):
                listing.directories.add(relative)
                pending.append(relative)
            elif stat.S_ISREG(info.st_mode):
                listing.files[relative] = info.st_size
            else:
                listing.special.append(relative)
    listing.links.sort()
    listing.special.sort()
    return listing


def _list_remote(fs: pafs.FileSystem, root: str) -> Listing:
    listing = Listing()
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except FileNotFoundError:
        return listing
    except OSError as e:
        listing.unlistable.append((".", fmt.one_line(e)))
        return listing
    for info in infos:
        relative = info.path[len(root) + 1 :]
        if info.type == pafs.FileType.File:
            listing.files[relative] = int(info.size or 0)
        elif info.type == pafs.FileType.Directory:
            listing.directories.add(relative)
        else:
            listing.special.append(relative)
    listing.special.sort()
    return listing


def list_artifact(fs: pafs.FileSystem, root: str) -> Listing:
    """Every entry under ``root`` at any depth; links are listed, not followed."""
    root = root.rstrip("/")
    return _list_local(root) if isinstance(fs, pafs.LocalFileSystem) else _list_remote(fs, root)
