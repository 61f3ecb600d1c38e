"""Dagster run config generated from the spec models, so every field defaults to the spec.

The launchpad shows the spec's values; an override is validated by the same pydantic
model the spec uses, so a bad override fails with the same message a bad spec would.
"""

from __future__ import annotations

import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
from pydantic import BaseModel, create_model

M = TypeVar("M", bound=BaseModel)


def _config_type(annotation: Any) -> Any:
    """Map a spec annotation to one Dagster config accepts (tuples -> lists, Path/Enum -> str)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Path or (isinstance(annotation, type) and issubclass(annotation, Enum)):
        return str  # validated back into the Enum by the spec model in `to_spec`
    if origin is tuple:
        return list[_config_type(args[0])]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _config_type(inner[0]) | None if len(inner) == 1 else annotation
    return annotation


def _config_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_config_value(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return dict(value)
    return value


def config_class(
    name: str, defaults: BaseModel, exclude: tuple[str, ...] = (), **extra: tuple[Any, Any]
) -> type[dg.Config]:
    """A `dg.Config` subclass whose fields mirror `defaults`' model, defaulted to its values."""
    fields: dict[str, Any] = {}
    for field_name, info in type(defaults).model_fields.items():
        if field_name in exclude:
            continue
        fields[field_name] = (_config_type(info.annotation), _config_value(getattr(defaults, field_name)))
    return create_model(name, __base__=dg.Config, **fields, **extra)  # type: ignore[call-overload]


def to_spec(config: dg.Config, defaults: M) -> M:
    """Validate run config back into the spec model, keeping excluded fields from `defaults`."""
    data = defaults.model_dump()
    data.update({k: v for k, v in config.model_dump().items() if k in data})
    return type(defaults).model_validate(data)
