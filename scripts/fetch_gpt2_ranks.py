"""Fetch GPT-2's BPE ranks for the tokenizer evaluation: `python scripts/fetch_gpt2_ranks.py OUT`.

Nothing is downloaded at run time, and no model hub is reachable, but PyPI is: the
`openai-whisper` source distribution ships `whisper/assets/gpt2.tiktoken`, GPT-2's
ranks in tiktoken's format (with GPT-2's split pattern they give GPT-2's ids, e.g.
"Hello world" -> 15496, 995). This takes it with the ordinary package client (pip
download), checks the archive's and the file's SHA-256 and writes OUT atomically.
When anything fails it says so and exits 0: the evaluation then skips GPT-2 with a
note, it never fails a build or an install.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "openai-whisper==20250625"
SDIST_SHA256 = "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96"
MEMBER = "openai_whisper-20250625/whisper/assets/gpt2.tiktoken"
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"


def fetch(out: Path) -> str:
    """Write the ranks to `out`; return what happened."""
    if out.exists() and hashlib.sha256(out.read_bytes()).hexdigest() == RANKS_SHA256:
        return f"{out}: present, SHA-256 verified"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", PACKAGE, "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        archives = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode or not archives:
            return f"skipped: pip download {PACKAGE} failed: {done.stderr.strip()[-300:]}"
        digest = hashlib.sha256(archives[0].read_bytes()).hexdigest()
        if digest != SDIST_SHA256:
            return f"skipped: {archives[0].name} has SHA-256 {digest}, expected {SDIST_SHA256}"
        with tarfile.open(archives[0]) as tar:
            member = tar.extractfile(MEMBER)
            data = member.read() if member else b""
    digest = hashlib.sha256(data).hexdigest()
    if digest != RANKS_SHA256:
        return f"skipped: {MEMBER} has SHA-256 {digest}, expected {RANKS_SHA256}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_bytes(data)
    os.replace(tmp_out, out)
    return f"{out}: written from {PACKAGE}, SHA-256 verified"


def main() -> int:
    out = Path(sys.argv[1])
    try:
        print(f"gpt2 ranks: {fetch(out)}")
    except (OSError, subprocess.SubprocessError, tarfile.TarError, KeyError) as exc:
        print(f"gpt2 ranks: skipped: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
