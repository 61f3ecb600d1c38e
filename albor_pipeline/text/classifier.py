"""The quality classifier's model as hygiene scores with it: hashed word n-grams and a
linear model's weights (trained by `stages/quality/classifier.py`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS, MODEL = "weights.npy", "model.json"


@dataclass(frozen=True)
class ModelRef:
    """A stored model: where it is, and its weights' SHA-256 (its identity in the task store)."""

    directory: str
    sha256: str


def vectorizer(features: int, ngrams: int) -> Any:
    """Hashed word 1..n-gram counts, L2-normalised (stateless: its settings are the model)."""
    from sklearn.feature_extraction.text import HashingVectorizer  # the [quality] extra

    return HashingVectorizer(n_features=features, ngram_range=(1, ngrams), alternate_sign=False, norm="l2")


@dataclass(frozen=True)
class Scorer:
    """The stored model's `quality_score` of texts."""

    weights: np.ndarray
    intercept: float
    features: int
    ngrams: int

    @classmethod
    def load(cls, directory: Path) -> Scorer:
        model = json.loads((directory / MODEL).read_text(encoding="utf-8"))
        weights = np.load(directory / WEIGHTS)
        return cls(weights, float(model["intercept"]), int(model["features"]), int(model["ngrams"]))

    def scores(self, texts: list[str]) -> np.ndarray:
        x = vectorizer(self.features, self.ngrams).transform(list(texts))
        return 1.0 / (1.0 + np.exp(-(x @ self.weights + self.intercept)))


@cache
def scorer(model: ModelRef) -> Scorer:
    """This process's scorer of a stored model (loaded once per model version)."""
    return Scorer.load(Path(model.directory))
