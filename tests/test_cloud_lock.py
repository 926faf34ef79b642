"""requirements/cloud.txt (the `cloud` extra's clients and their dependencies, hash-pinned; requirements/lock_cloud.py)
agrees with pyproject.toml and requirements/constraints.txt, so the hashed install and the constrained project
install after it (Makefile `setup`) never disagree on a version."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

ENTRY = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.M)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_hashed_cloud_package_is_pinned_to_the_constraints_version_and_covers_the_extra():
    text = (REPO / "requirements" / "cloud.txt").read_text()
    entries = {_norm(n): (v, h) for n, v, h in ENTRY.findall(text)}
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(body) == 2 * len(entries) > 0, "every entry is one name==version line and one --hash line"
    pins = {
        _norm(line.split("==")[0]): line.split("==")[1].strip()
        for line in (REPO / "requirements" / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    wrong = {n: (v, pins.get(n)) for n, (v, _) in entries.items() if pins.get(n) != v}
    assert not wrong, f"cloud.txt version != constraints.txt: {wrong}"
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cloud"]
    for req in extra:
        name, version = req.split("==")
        assert entries.get(_norm(name), (None,))[0] == version, req
