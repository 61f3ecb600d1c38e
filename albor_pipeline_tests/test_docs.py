"""The README and docs/ hold to their word: a short front door, no commit history, links that
resolve, and commands that work.

The commands are those of every ```bash block, plus every `make <target>` mentioned anywhere.
Only the cheap, offline ones run for real (`--help`, `albor spec`, `make -n`); any other
`albor`, `dagster`, `dg` or `bench/run.py` command runs as `--help`, and every long option it
uses must be in that help. A command of any other program fails the test: give it a rule here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from albor_pipeline.spec import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
BIN = Path(sys.executable).parent
MAX_README_LINES = 250

FENCE = re.compile(r"^ *```(\w*)[^\n]*\n(.*?)^ *```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# A commit hash: 7-40 lowercase hex characters standing alone, with a digit and a letter.
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
# Change history and comparisons with earlier code belong in the git log: an issue number,
# "what changed", runs dated against each other, a table's "now" column beside an older one.
HISTORY = re.compile(
    r"\bissue\s+#?\d+"
    r"|\bwhat changed\b"
    r"|\bsame day\b"
    r"|\bearlier (?:the same day|that day|ones|runs|code|commits?)\b"
    r"|\bthan before\b"
    r"|\bnew since\b"
    r"|\bbefore and\b[^|\n]{0,30}\bnow\b"
    r"|\|\s*now(?: s)?\s*\|",
    re.I,
)
REV = re.compile(r"\bREV\b")  # an unnamed earlier commit (upper case: `git rev-parse` is fine)


def rel(page: Path) -> str:
    return page.relative_to(REPO_ROOT).as_posix()


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code: where links live."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines; move detail into docs/ (at most {MAX_README_LINES})"
    )


def test_docs_exist() -> None:
    assert DOCS, "docs/*.md"
    for page in DOCS:
        assert f"docs/{page.name}" in README.read_text(), f"README.md's 'Where to read more' should link {rel(page)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_commit_hashes_or_history(page: Path) -> None:
    text = page.read_text()
    hashes = sorted({t for t in HEX.findall(text) if re.search(r"[0-9]", t) and re.search(r"[a-f]", t)})
    assert not hashes, f"{rel(page)}: commit-hash-like tokens {hashes}; history belongs in the git log"
    found = history(text)
    assert not found, f"{rel(page)}: change history {found}; state what the code does now, each figure once"


def history(text: str) -> list[str]:
    """What `test_no_commit_hashes_or_history` rejects in `text`."""
    return HISTORY.findall(text) + REV.findall(text)


@pytest.mark.parametrize(
    "line",
    [
        "see issue 33",
        "What changed the figures: one pool",
        "so either costs what changed",
        "(0.36x) earlier the same day",
        "other runs the same day gave 0.0066",
        "about 3 s (9 %) slower than before",
        "(`stats` is new since the last release)",
        "both on REV's shipped spec",
        "took 19.89 task-seconds before and 5.60 now",
        "| group | 2026-11-23 s | now s |",
    ],
)
def test_history_is_recognised(line: str) -> None:
    assert history(line), line


@pytest.mark.parametrize(
    "line",
    [
        "a rerun costs only the changed work",
        "the automation sensor then rebuilds what the changed sources feed",
        "commit = git rev-parse HEAD",
        "fingerprints the sources now; the sensor then rebuilds",
        "a worker hands freed memory back before its next task",
        "| figure | value | target |",
    ],
)
def test_user_prose_is_not_history(line: str) -> None:
    assert not history(line), line


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no {resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
    assert not broken, f"{rel(page)}: broken links: {broken}"


# --- commands -----------------------------------------------------------------------------


def bash_commands() -> Iterator[tuple[str, list[str]]]:
    """(page, argv) for every command line of every ```bash block, env assignments dropped."""
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text()):
            if lang != "bash":
                continue
            for line in body.splitlines():
                words = shlex.split(line, comments=True)
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    words = words[1:]
                if words:
                    yield rel(page), words


def make_targets() -> set[str]:
    """Every target of `make <target>` in a bash block or in inline code anywhere."""
    targets = {t for _, argv in bash_commands() if argv[0] == "make" for t in argv[1:] if not t.startswith("-")}
    for page in PAGES:
        for code in INLINE_CODE.findall(page.read_text()):
            targets.update(re.findall(r"^`make ([a-z][\w-]*)", code))
    return targets


def program(word: str) -> str:
    return Path(word).name


def checked(argv: list[str]) -> tuple[list[str], list[str], bool]:
    """(the command to run, the options its help must list, whether to run `argv` as is)."""
    name = program(argv[0])
    if name == "albor":
        sub = next((w for w in argv[1:] if not w.startswith("-")), None)
        if sub == "spec" or "--help" in argv or sub is None:
            return [str(BIN / "albor"), *argv[1:]], [], True
        return [str(BIN / "albor"), sub, "--help"], argv[2:], False
    if name in ("python", "python3") and len(argv) > 1 and argv[1] == "bench/run.py":
        return [sys.executable, "bench/run.py", "--help"], argv[2:], False
    if name in ("dagster", "dg"):
        first_option = next((i for i, w in enumerate(argv) if w.startswith("-")), len(argv))
        return [str(BIN / name), *argv[1:first_option], "--help"], argv[first_option:], False
    raise AssertionError(f"no rule for {shlex.join(argv)}: add one to test_docs.py (run it cheaply, or skip it)")


def unique_commands() -> list[tuple[str, list[str]]]:
    """Each command once (the first page naming it); `make` is tested below, `source` is the shell's."""
    seen: set[str] = set()
    out = []
    for page, argv in bash_commands():
        if argv[0] not in ("make", "source") and shlex.join(argv) not in seen:
            seen.add(shlex.join(argv))
            out.append((page, argv))
    return out


COMMANDS = unique_commands()


def command_id(item: tuple[str, list[str]]) -> str:
    return f"{item[0]}: {shlex.join(item[1])}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The defaults the docs assume: no ALBOR_* overrides, a throwaway DAGSTER_HOME."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("ALBOR_")}
    out["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    return out


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("item", COMMANDS, ids=command_id)
def test_command_works(item: tuple[str, list[str]], env: dict[str, str]) -> None:
    page, argv = item
    cmd, options, as_is = checked(argv)
    done = run(cmd, env)
    assert done.returncode == 0, f"{page}: `{shlex.join(argv)}` ran as `{shlex.join(cmd)}`: {done.stderr[-2000:]}"
    if as_is and program(argv[0]) == "albor" and "spec" in argv and "--help" not in argv:
        spec = json.loads(done.stdout)
        assert spec["sources"], f"{page}: `{shlex.join(argv)}` printed no sources"
    missing = [o.split("=")[0] for o in options if o.startswith("--") and o.split("=")[0] not in done.stdout]
    assert not missing, f"{page}: `{shlex.join(argv)}` uses {missing}, which `{shlex.join(cmd)}` does not list"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", sorted(make_targets()))
def test_make_target_exists(target: str, env: dict[str, str]) -> None:
    done = run(["make", "-n", target], env)
    assert done.returncode == 0, f"`make {target}` is in the docs but `make -n {target}` fails: {done.stderr}"


def test_docs_have_commands() -> None:
    """The collection above is not vacuous: the README's two commands and the CLI are found."""
    assert {"run", "test"} <= make_targets()
    assert any(program(argv[0]) == "albor" for _, argv in COMMANDS)
