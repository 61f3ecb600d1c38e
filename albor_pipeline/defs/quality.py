"""The quality classifier (`quality.classifier`): trained here from the spec's positive and
negative sources; hygiene scores `quality_score` with it where a rule reads it."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import Check, CheckContext, NoConfig, Stage, StageContext
from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import QUALITY_CLASSIFIER, Layout, ingested_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import ClassifierSpec, PipelineSpec, SourceSpec
from albor_pipeline.stages.hygiene.rules import signals_read
from albor_pipeline.stages.quality.classifier import train_classifier
from albor_pipeline.summaries.quality import ClassifierSummary, metric_rows
from albor_pipeline.summaries.quality import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.classifier import WEIGHTS, ModelRef

GROUP = "quality"


def classifier(spec: ClassifierSpec, ctx: StageContext, _: NoConfig) -> StageOutput:
    layout = ctx.layout
    result = train_classifier(
        [layout.ingested(n) for n in spec.positive],
        [layout.ingested(n) for n in spec.negative],
        spec,
        layout.stage_dir(QUALITY_CLASSIFIER),
        layout.root,
    )
    summary = result.summary
    return StageOutput(
        artifacts=result.artifacts,
        config=spec.model_dump(mode="json"),
        summary=summary,
        row_count=sum(summary.documents.values()),
        metadata={
            "held_out": dg.MetadataValue.md(markdown_table(metric_rows(summary))),
            **{
                k: v
                for k, v in (("precision", summary.precision), ("recall", summary.recall), ("auc", summary.auc))
                if v is not None
            },
            "documents_positive": summary.documents.get("positive", 0),
            "documents_negative": summary.documents.get("negative", 0),
        },
    )


def _separates(ctx: CheckContext) -> CheckOutcome:
    """Held out, the model ranks a positive document above a negative one more often than not."""
    summary = ClassifierSummary.model_validate(ctx.manifest.summary)
    auc = summary.auc
    return CheckOutcome(
        auc is not None and auc > 0.5,
        f"held-out AUC {auc:.4f} on {summary.held_out:,} documents" if auc is not None else "no held-out AUC",
        {"auc": auc},
    )


def reads_model(spec: PipelineSpec, src: SourceSpec) -> bool:
    """Whether `src`'s hygiene scores with the classifier: its rules read `quality_score`."""
    return spec.quality.classifier is not None and "quality_score" in signals_read(src.hygiene.rules)


def model_of(spec: PipelineSpec, src: SourceSpec, layout: Layout) -> ModelRef | None:
    """The classifier `src`'s hygiene scores with, when it does (`reads_model`)."""
    if not reads_model(spec, src):
        return None
    weights = next(a for a in read_manifest(layout, QUALITY_CLASSIFIER).outputs if a.path.endswith(WEIGHTS))
    return ModelRef(str(layout.stage_dir(QUALITY_CLASSIFIER)), weights.sha256)


def stages(spec: PipelineSpec) -> list[Stage[NoConfig]]:
    clf = spec.quality.classifier
    if clf is None:
        return []
    return [
        Stage(
            name=QUALITY_CLASSIFIER,
            group=GROUP,
            description="A quality classifier trained here (hashed word n-grams, logistic regression) on "
            f"{', '.join(clf.positive)} (positive) against {', '.join(clf.negative)} (negative); hygiene's "
            "`quality_score` signal. Held-out precision, recall and AUC in metadata.",
            config=NoConfig,
            defaults=NoConfig(),
            work=partial(classifier, clf),
            deps=tuple(ingested_stage(n) for n in (*clf.positive, *clf.negative)),
            checks=(Check("separates", "Held out, the model's AUC is above 0.5.", _separates),),
            kinds=("numpy",),
        )
    ]
