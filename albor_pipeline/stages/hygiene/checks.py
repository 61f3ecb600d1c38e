"""No secret left in the filtered text: an independent pass, its own patterns and entropy."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.checks import CheckOutcome, per_shard
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.shards import row_group_sha256
from albor_pipeline.runtime.taskstore import memo
from albor_pipeline.text.secrets import redact_path


@dataclass(frozen=True)
class _Leak:
    """A kind of secret the no-secrets check looks for: literal markers (a cheap test that a
    document may hold one) and the pattern that finds it."""

    kind: str
    markers: tuple[str, ...]
    pattern: re.Pattern[str]


# The no-secrets check's own patterns, written apart from detect-secrets' so that it does not
# share the redactor's blind spots: known token formats, loose in length and context.
LEAKS = (
    _Leak(
        "GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{30,})"),
    ),
    _Leak(
        "GitLab token",
        (*(f"gl{p}-" for p in ("pat", "dt", "ft", "soat", "rt", "cbt", "imt", "ptt", "agent", "oas")), "GR1348941"),
        re.compile(r"\b(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[A-Za-z0-9_-]{20,}"),
    ),
    _Leak(
        "Slack token",
        ("xox", "hooks.slack.com"),
        re.compile(r"\bxox[abposr]-\d{6,}-[A-Za-z0-9-]{10,}|hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
    ),
    _Leak("Stripe key", ("k_live_",), re.compile(r"\b[rs]k_live_[A-Za-z0-9]{16,}")),
    _Leak("npm token", ("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    _Leak("PyPI token", ("pypi-",), re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{40,}")),
    _Leak("OpenAI key", ("T3BlbkFJ",), re.compile(r"\bsk-[A-Za-z0-9_-]{10,}T3BlbkFJ[A-Za-z0-9_-]{10,}")),
    _Leak("JWT", ("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    _Leak(
        "AWS access key id",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
    ),
    _Leak(
        "AWS secret key",
        ("aws", "AWS", "Aws"),
        re.compile(
            r"(?i:aws)[\w.-]{0,30}?(?i:secret)[\w.-]{0,30}?['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"
        ),
    ),
    _Leak(
        "private key",
        ("PRIVATE KEY", "PuTTY-User-Key"),
        re.compile(
            r"-----BEGIN[A-Z ]*PRIVATE KEY[A-Z ]*-----[^-]{0,300}?[A-Za-z0-9+/]{40}"
            r"|PuTTY-User-Key-File-\d.{0,300}?Private-Lines:\s*\d+\s*[A-Za-z0-9+/]{40}",
            re.DOTALL,
        ),
    ),
    # What a redaction that replaced a part of a token leaves: the rest glued to the placeholder.
    _Leak("token cut by <KEY>", ("<KEY>",), re.compile(r"<KEY>[A-Za-z0-9_-]{8,}|[A-Za-z0-9_-]{8,}<KEY>")),
)
# A value of 20+ token characters after an assignment (`=`, `:`, `=>`), quoted or not, whose
# name (just before the operator) says key, secret, token, password or credential.
SECRET_ASSIGNED = r"""(?i:key|secret|token|passw(?:or)?d|pwd|credential|auth)[\w.-]*['"]?\]?\s*"""
ASSIGNED_VALUE = re.compile(r"""[:=>]\s*[rbuf]?['"]?(?:Bearer\s+)?([A-Za-z0-9+/_=-]{20,})""")
SECRET_NAME_BEFORE = re.compile(SECRET_ASSIGNED + r"(?::|=|:=|=>)?\s*\Z")
# Documents worth a closer look: a marker, or a value assigned to a secret-ish name. One RE2
# pass over a whole column (pyarrow), since most documents hold neither.
CANDIDATES = "|".join(
    [*(re.escape(m) for leak in LEAKS for m in leak.markers), SECRET_ASSIGNED + ASSIGNED_VALUE.pattern]
)
HIGH_ENTROPY_BITS = 4.5  # random base64 of 24+ characters has more; words and identifiers less
LEAK_EXAMPLES = 5  # file paths a failing check names


def _entropy(value: str) -> float:
    """Shannon entropy of `value`'s characters, in bits."""
    counts = np.unique(np.frombuffer(value.encode("utf-8"), dtype=np.uint8), return_counts=True)[1] / len(value)
    return float(-(counts * np.log2(counts)).sum())


def _high_entropy_values(text: str) -> int:
    """Values assigned to a secret-ish name that look random: letters of both cases and
    digits, and at least `HIGH_ENTROPY_BITS` of entropy per character."""
    found = 0
    for match in ASSIGNED_VALUE.finditer(text):
        value = match.group(1)
        if (
            SECRET_NAME_BEFORE.search(text, max(0, match.start() - 64), match.start() + 1)
            and any(c.islower() for c in value)
            and any(c.isupper() for c in value)
            and any(c.isdigit() for c in value)
            and _entropy(value) >= HIGH_ENTROPY_BITS
        ):
            found += 1
    return found


def find_leaks(text: str) -> Counter[str]:
    """Secret-shaped strings in `text` by kind (counts only: values never leave here)."""
    found: Counter[str] = Counter()
    for leak in LEAKS:
        if any(m in text for m in leak.markers):
            hits = sum(1 for _ in leak.pattern.finditer(text))
            if hits:
                found[leak.kind] += hits
    entropy = _high_entropy_values(text)
    if entropy:
        found["high-entropy value of a secret name"] += entropy
    return found


def _row_group_leaks(path: Path, group: int) -> tuple[int, Counter[str], list[str]]:
    """(documents, leaks by kind, the first files holding one, redacted) of one row group."""
    batch = pq.ParquetFile(path).read_row_group(group, columns=["text", "file"])
    found: Counter[str] = Counter()
    files: list[str] = []
    candidates = pc.match_substring_regex(batch.column(0), CANDIDATES).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(candidates).tolist():
        leaks = find_leaks(batch.column(0)[row].as_py())
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
