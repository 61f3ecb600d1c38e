"""Regenerate the shipped sample sources (run from the repo root).

`pydoc_topics.jsonl`: the interpreter's own help topics (pydoc_data.topics), one JSON
object per topic. Prose about Python that every machine has, as a JSONL data source.
"""

from __future__ import annotations

import json
from pathlib import Path
from pydoc_data.topics import topics


def main() -> None:
    out = Path(__file__).with_name("pydoc_topics.jsonl")
    with open(out, "w", encoding="utf-8", newline="\n") as fh:
        for name in sorted(topics):
            fh.write(json.dumps({"topic": name, "text": topics[name]}, ensure_ascii=False) + "\n")
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {len(topics)} topics)")


if __name__ == "__main__":
    main()
