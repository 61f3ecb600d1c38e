"""Fetch OpenAI's BPE ranks for the tokenizer comparison: `python scripts/fetch_ranks.py DIR`.

Nothing is downloaded at run time, and no model hub is reachable, but PyPI is:
- GPT-2's ranks ship in the `openai-whisper` source distribution (`whisper/assets/gpt2.tiktoken`);
- GPT-4's (`cl100k_base`) and GPT-4o's (`o200k_base`) ship gzipped in the `bpe-openai` wheel
  (`bpe_openai/data/*.tiktoken.gz`).
This takes each package with the ordinary package client (pip download), checks the
archive's SHA-256 and each ranks file's (the hashes tiktoken itself expects), and writes
DIR/gpt2.tiktoken, DIR/cl100k_base.tiktoken and DIR/o200k_base.tiktoken atomically. When
anything fails it says so and exits 0: the comparison then skips that baseline with a
note, it never fails a build or an install.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ranks:
    out: str  # file name under DIR
    sha256: str  # of the ranks file (tiktoken's expected hash)
    package: str
    archive_sha256: str
    member: str  # the ranks file inside the archive
    sdist: bool  # a source distribution (tar.gz), else a wheel (zip, the member gzipped)


RANKS = (
    Ranks(
        "gpt2.tiktoken",
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        "openai-whisper==20250625",
        "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
        "openai_whisper-20250625/whisper/assets/gpt2.tiktoken",
        True,
    ),
    *(
        Ranks(
            f"{name}.tiktoken",
            sha,
            "bpe-openai==0.1.4",
            "91dde48b7c27a155ec94563ef488d95267bd17e2e8db360aba299ca9819335ba",
            f"bpe_openai/data/{name}.tiktoken.gz",
            False,
        )
        for name, sha in (
            ("cl100k_base", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
            ("o200k_base", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
        )
    ),
)


def _member(archive: Path, ranks: Ranks) -> bytes:
    if ranks.sdist:
        with tarfile.open(archive) as tar:
            member = tar.extractfile(ranks.member)
            return member.read() if member else b""
    with zipfile.ZipFile(archive) as wheel:
        return gzip.decompress(wheel.read(ranks.member))


def _download(package: str, sdist: bool, into: str) -> Path | str:
    """The package's archive in `into`, or why not."""
    kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, package, "-d", into]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    archives = list(Path(into).glob("*.tar.gz" if sdist else "*.whl"))
    if done.returncode or not archives:
        return f"pip download {package} failed: {done.stderr.strip()[-300:]}"
    return archives[0]


def fetch(ranks: Ranks, directory: Path) -> str:
    """Write one ranks file under `directory`; return what happened."""
    out = directory / ranks.out
    if out.exists() and hashlib.sha256(out.read_bytes()).hexdigest() == ranks.sha256:
        return f"{out}: present, SHA-256 verified"
    with tempfile.TemporaryDirectory() as tmp:
        archive = _download(ranks.package, ranks.sdist, tmp)
        if isinstance(archive, str):
            return f"skipped: {archive}"
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != ranks.archive_sha256:
            return f"skipped: {archive.name} has SHA-256 {digest}, expected {ranks.archive_sha256}"
        data = _member(archive, ranks)
    digest = hashlib.sha256(data).hexdigest()
    if digest != ranks.sha256:
        return f"skipped: {ranks.member} has SHA-256 {digest}, expected {ranks.sha256}"
    directory.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_bytes(data)
    os.replace(tmp_out, out)
    return f"{out}: written from {ranks.package}, SHA-256 verified"


def main() -> int:
    directory = Path(sys.argv[1])
    for ranks in RANKS:
        try:
            print(f"{ranks.out}: {fetch(ranks, directory)}")
        except (OSError, subprocess.SubprocessError, tarfile.TarError, zipfile.BadZipFile, KeyError) as exc:
            print(f"{ranks.out}: skipped: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
