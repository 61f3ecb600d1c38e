"""A stage's facts as a typed model, and the bits every stage's report renders with.

Each stage declares its summary as a `Report` in its own package (`stages/<name>/report.py`):
the stage's work builds it, `run_stage` writes it once into the manifest's `summary`
(`model_dump(mode="json")`), and provenance and the dataset card read it back with
`Model.model_validate(manifest.summary)`. A renamed or retyped fact then fails where it is
read, never silently. Field names and order are the manifest's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from albor_pipeline.runtime.markdown import markdown_table


class Report(BaseModel):
    """A stage's summary. Unknown keys are an error: a summary written by another version of
    a stage does not pass for this one's. Aliases (a key with a space) are what is written."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    def to_json(self) -> dict[str, Any]:
        """The manifest's `summary`: JSON types, the fields in declaration order."""
        return self.model_dump(mode="json")


def counts(values: Mapping[str, int]) -> str:
    """`a 3, b 1` (a count per key), or `none`."""
    return ", ".join(f"{k} {v}" for k, v in values.items()) or "none"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table of `rows` under `header`, then a blank line (PROVENANCE.md's sections)."""
    return [markdown_table([dict(zip(header, r)) for r in rows]), ""]
