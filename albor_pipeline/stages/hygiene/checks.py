"""No secret left in the filtered text: an independent pass, its own patterns and entropy."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.checks import CheckOutcome, per_shard
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.shards import row_group_sha256
from albor_pipeline.runtime.taskstore import memo
from albor_pipeline.text.secrets import redact_path


@dataclass(frozen=True)
class _Leak:
    """A kind of secret the no-secrets check looks for: an RE2 screen (a document holding one
    matches it: one pass over a column picks the few documents to try), the pattern that
    finds it, and how many a match holds where the pattern cannot say (default 1)."""

    kind: str
    screen: str
    pattern: re.Pattern[str]
    count: Callable[[str, re.Match[str]], int] | None = None


def _literals(*markers: str) -> str:
    """A screen that is any of `markers`."""
    return "|".join(map(re.escape, markers))


def _entropy(value: str) -> float:
    """Shannon entropy of `value`'s characters, in bits."""
    counts = np.unique(np.frombuffer(value.encode("utf-8"), dtype=np.uint8), return_counts=True)[1] / len(value)
    return float(-(counts * np.log2(counts)).sum())


def _looks_random(value: str, bits: float) -> bool:
    """Letters of both cases and digits, and at least `bits` of entropy per character."""
    return (
        any(c.islower() for c in value)
        and any(c.isupper() for c in value)
        and any(c.isdigit() for c in value)
        and _entropy(value) >= bits
    )


def _random_secret_named(text: str, match: re.Match[str]) -> int:
    """Whether an `ASSIGNED_VALUE` looks random and its name (just before) says secret."""
    named = SECRET_NAME_BEFORE.search(text, max(0, match.start() - 64), match.start() + 1)
    return bool(named and _looks_random(match[1], HIGH_ENTROPY_BITS))


def _random_keys(text: str, match: re.Match[str]) -> int:
    """The random-looking 40-character runs (`AWS_KEY`) on the line of `match`, a word saying
    secret: counted at the line's first such word."""
    start, end = text.rfind("\n", 0, match.start()) + 1, text.find("\n", match.end())
    if AWS_CONTEXT.search(text, start, match.start()):
        return 0
    keys = AWS_KEY.findall(text, start, len(text) if end < 0 else end)
    return sum(_looks_random(key, AWS_SECRET_BITS) for key in keys)


def _discord_head(text: str, match: re.Match[str]) -> int:
    """Whether a Discord token's head (its user id in base64) comes right before `match`."""
    return bool(DISCORD_HEAD.search(text[max(0, match.start() - 29) : match.start()]))


def _password_counts(text: str, match: re.Match[str]) -> int:
    """A password match counts unless it is unquoted after a "=" whose name does not start its
    line (indented code's `password = old_pw2`, not an .env or ini line)."""
    return not match["after_equals"] or bool(
        LINE_HEAD.fullmatch(text, text.rfind("\n", 0, match.start()) + 1, match.start())
    )


# A value of 20+ token characters after an assignment (`=`, `:`, `=>`), quoted or not, whose
# name (just before the operator) says key, secret, token, password or credential.
SECRET_ASSIGNED = r"""(?i:key|secret|token|passw(?:or)?d|pwd|credential|auth)[\w.-]*['"]?\]?\s*"""
ASSIGNED_VALUE = re.compile(r"""[:=>]\s*[rbuf]?['"]?(?:Bearer\s+)?([A-Za-z0-9+/_=-]{20,})""")
SECRET_NAME_BEFORE = re.compile(SECRET_ASSIGNED + r"(?::|=|:=|=>)?\s*\Z")
HIGH_ENTROPY_BITS = 4.5  # random base64 of 24+ characters has more; words and identifiers less
AWS_SECRET_BITS = 4.3  # a random 40-character key has less once in a thousand; identifiers stay near 4.0
AWS_CONTEXT = re.compile(r"secret|Secret|SECRET")  # "aws" alone is on most lines of AWS SDKs' code
AWS_KEY = re.compile(r"(?<![\w/+=.])[A-Za-z0-9/+]{40}(?![\w/+=]|\.\w)")  # not next to a ".": URLs, file names
# A Discord token from its first "." (a literal Python's re skips to), then its head before it.
DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27}")
DISCORD_HEAD = re.compile(r"(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{23,27}\Z")
LINE_HEAD = re.compile(r"(?:export[ \t]+|set[ \t]+)?[\w.-]*")
# A password name: one that ends in password, passwd, passphrase, or a "pass"/"pwd" of its own
# (`db_pass`, not `bypass`), then a quoted dict key's or a subscript's end.
PASSWORD_NAME = r"""(?i:p(?:ass(?:w(?:or)?d|phrase)|(?<![a-z]p)ass|(?<![a-z]p)wd))['"]?\]?[ \t]*"""
# A password: a letter and a digit among 8+ characters that are no code's brackets or separators,
# not a path (`/`, `~`, `.`) nor a template (`${X}`, `%(x)s`).
PASSWORD = r"""(?=[^'"\s]*[A-Za-z])(?=[^'"\s]*\d)(?![/~.]|\$\{|%\()[^\s'"(){}\[\]<>,;\\]{8,}"""
# The no-secrets check's own patterns, written apart from detect-secrets' so that it does not
# share the redactor's blind spots: known token formats, loose in length and context.
LEAKS = (
    _Leak(
        "GitHub token",
        _literals("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{30,})"),
    ),
    _Leak(
        "GitLab token",
        r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941",
        re.compile(r"\b(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[A-Za-z0-9_-]{20,}"),
    ),
    _Leak(
        "Slack token",
        _literals("xox", "hooks.slack.com"),
        re.compile(r"\bxox[abposr]-\d{6,}-[A-Za-z0-9-]{10,}|hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
    ),
    _Leak("Stripe key", "k_live_", re.compile(r"\b[rs]k_live_[A-Za-z0-9]{16,}")),
    _Leak("npm token", "npm_", re.compile(r"\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    _Leak("PyPI token", "pypi-", re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{40,}")),
    _Leak("OpenAI key", "T3BlbkFJ", re.compile(r"\bsk-[A-Za-z0-9_-]{10,}T3BlbkFJ[A-Za-z0-9_-]{10,}")),
    _Leak("JWT", "eyJ", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    _Leak(
        "AWS access key id",
        r"AKIA|ASIA|ABIA|ACCA|A3T",
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
    ),
    # A random-looking 40-character run on a line saying secret (prose, comments, `export`).
    _Leak(
        "AWS secret key",
        AWS_CONTEXT.pattern,
        AWS_CONTEXT,
        _random_keys,
    ),
    _Leak("Hugging Face token", r"hf_|api_org_", re.compile(r"(?<![A-Za-z0-9])(?:hf|api_org)_[A-Za-z0-9]{30,}")),
    _Leak("Anthropic key", "sk-ant-", re.compile(r"\bsk-ant-[a-z0-9]+-[A-Za-z0-9_-]{20,}")),
    _Leak("Google API key", "AIza", re.compile(r"\bAIza[A-Za-z0-9_-]{30,}")),
    _Leak("Twilio API key", r"SK[0-9a-f]{32}", re.compile(r"\bSK[0-9a-f]{32}\b")),
    _Leak(
        "Discord bot token",
        DISCORD_TAIL.pattern,
        DISCORD_TAIL,  # from its first ".", a literal Python's re skips to
        _discord_head,
    ),
    _Leak(
        "W&B key",
        r"(?i:wandb).*[0-9a-f]{40}",
        re.compile(r"(?i:wandb)[^\n]{0,30}?(?i:key|login)[^\n]{0,20}?(?<![0-9A-Za-z])[0-9a-f]{40}(?![0-9A-Za-z])"),
    ),
    _Leak("Azure SAS signature", r"[?&]sig=", re.compile(r"[?&]sig=[A-Za-z0-9%+/=]{30,}")),
    # A password assigned to a password name: quoted anywhere, or unquoted as the rest of a line,
    # after YAML's ":" or after a "=" whose name starts the line (.env, ini).
    _Leak(
        "password",
        r"""(?i:pass|pwd)[\w'"\]]*[ \t]*(?::=|=>|[:=])[ \t]*[rbuf]?['"]?[^\s'"]{8}""",
        re.compile(
            PASSWORD_NAME + r"""(?:(?::=|=>|[:=])[ \t]*[rbuf]?['"]""" + PASSWORD + r"""['"]"""
            r"|(?::[ \t]+|(?P<after_equals>=)[ \t]*)" + PASSWORD + r"[ \t]*(?:#|$))",
            re.MULTILINE,
        ),
        _password_counts,
    ),
    _Leak(
        "high-entropy value of a secret name",
        SECRET_ASSIGNED + ASSIGNED_VALUE.pattern,
        ASSIGNED_VALUE,
        _random_secret_named,
    ),
    # What a redaction that replaced a part of a token leaves: the rest glued to the placeholder.
    _Leak("token cut by <KEY>", re.escape("<KEY>"), re.compile(r"<KEY>[A-Za-z0-9_-]{8,}|[A-Za-z0-9_-]{8,}<KEY>")),
)
# Documents that may hold any: one RE2 pass over a column, since most hold none (RE2 runs one
# such union about as fast as one of its screens).
CANDIDATES = "|".join(leak.screen for leak in LEAKS)
LEAK_EXAMPLES = 5  # file paths a failing check names


def _screened(texts: pa.Array) -> dict[int, list[_Leak]]:
    """The leaks each text that may hold one may hold, by row: a pass of `CANDIDATES` over the
    column, then of each leak's screen over the rows it picks."""
    rows = np.flatnonzero(pc.match_substring_regex(texts, CANDIDATES).to_numpy(zero_copy_only=False))
    picked = texts.take(rows)
    hits = [pc.match_substring_regex(picked, leak.screen).to_numpy(zero_copy_only=False) for leak in LEAKS]
    return {row: [leak for leak, hit in zip(LEAKS, hits, strict=True) if hit[i]] for i, row in enumerate(rows.tolist())}


def find_leaks(text: str, leaks: Sequence[_Leak] | None = None) -> Counter[str]:
    """Secret-shaped strings in `text` by kind (counts only: values never leave here).
    `leaks`: the kinds to try (`_screened`), else those whose screen `text` matches."""
    found: Counter[str] = Counter()
    for leak in _screened(pa.array([text], pa.large_string())).get(0, []) if leaks is None else leaks:
        hits = sum(1 if leak.count is None else leak.count(text, m) for m in leak.pattern.finditer(text))
        if hits:
            found[leak.kind] += hits
    return found


def _row_group_leaks(path: Path, group: int) -> tuple[int, Counter[str], list[str]]:
    """(documents, leaks by kind, the first files holding one, redacted) of one row group."""
    batch = pq.ParquetFile(path).read_row_group(group, columns=["text", "file"])
    found: Counter[str] = Counter()
    files: list[str] = []
    for row, screened in _screened(batch.column(0)).items():
        leaks = find_leaks(batch.column(0)[row].as_py(), screened)
        found.update(leaks)
        if leaks and len(files) < LEAK_EXAMPLES:
            files.append(redact_path(batch.column(1)[row].as_py()))
    return batch.num_rows, found, files


def _shard_leaks(path: Path) -> tuple[int, Counter[str], list[str]]:
    """(documents, leaks by kind, the first files holding one, redacted) of one shard, a row
    group at a time, each kept under its own identity: a rebuild scans again only the row
    groups whose bytes changed."""
    documents = 0
    found: Counter[str] = Counter()
    files: list[str] = []
    for group in range(pq.ParquetFile(path).num_row_groups):
        rows, group_found, group_files = memo(
            _row_group_leaks, None, row_group_sha256(path, group), partial(_row_group_leaks, path, group)
        )
        documents += rows
        found.update(group_found)
        files = (files + group_files)[:LEAK_EXAMPLES]
    return documents, found, files


def check_no_secrets(paths: list[Path], executor: Executor = INLINE) -> CheckOutcome:
    """No document of a hygiene output holds a secret-shaped string, by the check's own
    patterns (`LEAKS`), independent of the redactor's: every document, a shard per task."""
    documents = 0
    found: Counter[str] = Counter()
    files: list[str] = []
    for shard_documents, shard_found, shard_files in per_shard(executor, _shard_leaks, paths):
        documents += shard_documents
        found.update(shard_found)
        files = (files + shard_files)[:LEAK_EXAMPLES]
    return CheckOutcome(
        not found,
        f"an independent scan of {documents:,} documents found {sum(found.values())} secret-shaped strings"
        + (": " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())) if found else ""),
        {"documents": documents, "left": dict(sorted(found.items())), "files": files},
    )
