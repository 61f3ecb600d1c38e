"""Each stage's run config (a `dg.Config` in defs/*.py) overrides fields of one spec section.

Every config field must be a field of its section, with the section's type made optional
(unset keeps the spec's value), so a run can neither name a setting the spec lacks nor give
a value the spec would read differently (`packing: str` took any string; `Packing` takes
the spec's choices). Dagster has no tuple or path type: a tuple is a list, a path a string.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import dagster as dg
import pytest
from pydantic import BaseModel

import albor_pipeline.defs
from albor_pipeline.defs.chat import EvalConfig, SftConfig
from albor_pipeline.defs.corpus import CorpusConfig, LongCorpusConfig
from albor_pipeline.defs.documents import DedupSplitConfig
from albor_pipeline.defs.fim import FimConfig
from albor_pipeline.defs.hygiene import HygieneConfig
from albor_pipeline.defs.ingestion import IngestConfig
from albor_pipeline.defs.mix import MixConfig
from albor_pipeline.defs.stage import NoConfig, resolve
from albor_pipeline.defs.tokenizer import TokenizerConfig
from albor_pipeline.defs.whatif import WhatIfConfig
from albor_pipeline.spec import (
    ChatSpec,
    CorpusSpec,
    ExportFormat,
    FimSpec,
    HoldoutSpec,
    HygieneSpec,
    LongSpec,
    Packing,
    SourceSpec,
    SplitMixSpec,
    TokenizerSpec,
)

SECTIONS: dict[type[dg.Config], type[BaseModel] | None] = {
    IngestConfig: SourceSpec,
    HygieneConfig: HygieneSpec,
    DedupSplitConfig: HoldoutSpec,
    MixConfig: SplitMixSpec,
    FimConfig: FimSpec,
    TokenizerConfig: TokenizerSpec,
    CorpusConfig: CorpusSpec,
    LongCorpusConfig: LongSpec,
    SftConfig: ChatSpec,
    EvalConfig: None,  # nothing to override
    NoConfig: None,
    WhatIfConfig: None,  # the what-if job's proposed changes, not a spec section
}
NOT_IN_SECTION = {FimConfig: {"enabled"}}  # per split: whether it is in `fim.splits`


def _run_configs() -> set[type[dg.Config]]:
    """Every `dg.Config` class defined in a module of the Dagster layer, resources aside."""
    found = set()
    for info in pkgutil.iter_modules(albor_pipeline.defs.__path__, "albor_pipeline.defs."):
        module = importlib.import_module(info.name)
        found |= {
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, dg.Config)
            and not issubclass(cls, dg.ConfigurableResource)
            and cls.__module__ == module.__name__
        }
    return found


def canonical(tp: Any) -> frozenset[Any]:
    """A type as the set of its alternatives, with what Dagster cannot express mapped to what it can."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return canonical(args[0])
    if origin in (Union, types.UnionType):
        return frozenset(alt for arg in args for alt in canonical(arg))
    if origin in (list, tuple):
        (item,) = [a for a in args if a is not Ellipsis]
        return frozenset({("list", canonical(item))})
    if origin is dict:
        return frozenset({("dict", canonical(args[0]), canonical(args[1]))})
    return frozenset({str if tp is Path else tp})


def test_every_run_config_is_checked() -> None:
    assert _run_configs() == set(SECTIONS)


@pytest.mark.parametrize("config", [c for c, s in SECTIONS.items() if s is not None], ids=lambda c: c.__name__)
def test_run_config_fields_are_the_spec_sections_made_optional(config: type[dg.Config]) -> None:
    section = SECTIONS[config]
    assert section is not None
    extra = NOT_IN_SECTION.get(config, set())
    wrong = []
    for name, field in config.model_fields.items():
        if name in extra:
            continue
        if name not in section.model_fields:
            wrong.append(f"{name}: not a field of {section.__name__}")
            continue
        expected = canonical(section.model_fields[name].annotation) | {type(None)}
        if canonical(field.annotation) != expected or field.default is not None:
            wrong.append(f"{name}: {field.annotation} = {field.default!r}, {section.__name__} has {expected}")
    assert not wrong, f"{config.__name__}: " + "; ".join(wrong)


def _enums(tp: Any) -> set[type[Enum]]:
    if inspect.isclass(tp) and issubclass(tp, Enum):
        return {tp}
    return {e for arg in get_args(tp) for e in _enums(arg)}


def test_run_config_enums_are_named_as_their_values() -> None:
    """Dagster's run config takes an enum member's name; the spec and the manifests hold its value."""
    enums = {e for config in SECTIONS for f in config.model_fields.values() for e in _enums(f.annotation)}
    assert Packing in enums
    assert [m for e in enums for m in e if m.name != m.value] == []


def test_an_enum_override_resolves_to_the_spec_type() -> None:
    config = CorpusConfig(packing="best_fit", formats=["parquet", "megatron"])  # as the launchpad gives it
    settings = resolve(CorpusSpec(), config, "corpus/train run config")
    assert settings.packing is Packing.best_fit
    assert settings.formats == (ExportFormat.parquet, ExportFormat.megatron)
    with pytest.raises(Exception, match="packing"):
        CorpusConfig(packing="bestfit")
