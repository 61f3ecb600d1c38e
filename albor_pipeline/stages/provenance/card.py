"""The dataset card (`README.md` at the data dir's root), written from provenance.json.

Its YAML header is a Hugging Face dataset card: `datasets.load_dataset(data_dir, name)`
finds each config (the corpora, the long subsets, SFT, eval sets) and its features. The
text states sources with their licences, the settings of every stage and intended use:
the same facts as PROVENANCE.md, never a second record.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import yaml

from albor_pipeline.runtime.layout import STATS, TOKENIZER, eval_stage, filtered_stage, sft_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.spec import SPLITS, SftPacking, SourceKind
from albor_pipeline.summaries.corpus import CONFIG_TOKENS, card_bos, card_corpora, card_size, corpora, hf_split
from albor_pipeline.summaries.documents import applied_removals
from albor_pipeline.summaries.ingest import card_sources, ingested
from albor_pipeline.summaries.provenance import Built
from albor_pipeline.summaries.stats import StatsSummary, card_charts
from albor_pipeline.summaries.tokenizer import TokenizerSummary, card_tokenizer, card_vocab
from albor_pipeline.text.base_eval import BASE_EVAL_SCHEMA
from albor_pipeline.text.chat import EVAL_SCHEMA, SFT_SCHEMA
from albor_pipeline.text.sequences import PACKED_SCHEMA, SEQ_SCHEMA


def _feature(kind: pa.DataType) -> dict[str, Any]:
    """An Arrow type as a card feature: a list is a `sequence` of its items' feature."""
    if pa.types.is_list(kind):
        inner = _feature(kind.value_type)
        return {"sequence": inner.get("dtype", inner)}
    return {"dtype": str(kind)}


def _features(schema: pa.Schema) -> list[dict[str, Any]]:
    """A Parquet schema as the card's `dataset_info` features."""
    return [{"name": f.name, **_feature(f.type)} for f in schema]


CORPUS_FEATURES = _features(SEQ_SCHEMA)
EVAL_FEATURES = _features(EVAL_SCHEMA)
BASE_EVAL_FEATURES = _features(BASE_EVAL_SCHEMA)


def _configs(built: Built) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(configs with their data files, dataset_info with their features) of what was built."""
    configs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []

    def add(name: str, files: list[tuple[str, str]], features: list[dict[str, Any]]) -> None:
        if files:
            configs.append({"config_name": name, "data_files": [{"split": s, "path": p} for s, p in files]})
            infos.append({"config_name": name, "features": [dict(f) for f in features]})  # no YAML anchors

    full = [c for c in corpora(built) if c.summary.sequences]
    for prefix, long in (("corpus", False), ("corpus_long", True)):
        files = [
            (hf_split(c.name), f"corpus/{c.name}/part-*.parquet") for c in full if c.name.startswith("long_") == long
        ]
        add(prefix, files, CORPUS_FEATURES)
    sft = [(hf_split(s), f"sft/{s}/part-*.parquet") for s in SPLITS if sft_stage(s) in built.stages]
    packed = built.spec.get("chat", {}).get("packing") == SftPacking.best_fit.value
    add("sft", sft, _features(PACKED_SCHEMA if packed else SFT_SCHEMA))
    for name in built.names():
        if eval_stage(name) in built.stages:
            features = BASE_EVAL_FEATURES if name in built.names(SourceKind.base_eval) else EVAL_FEATURES
            add(f"eval_{name}", [("test", f"eval/{name}.parquet")], features)
    if configs:
        configs[0]["default"] = True
    return configs, infos


def _settings(built: Built) -> dict[str, Any]:
    """Every stage's settings, from the spec (the tokenizer's as it ran, without its chat tokens)."""
    spec = built.spec
    tokenizer = built.stages.get(TOKENIZER, {}).get("config", {})
    return {
        "hygiene": {s["name"]: s["hygiene"] for s in spec["sources"] if filtered_stage(s["name"]) in built.stages},
        "holdout": spec["holdout"],
        "near_dedup": spec.get("near_dedup"),
        "decontaminate": spec.get("decontaminate"),
        "mix": spec["mix"],
        "fim": spec["fim"],
        "tokenizer": {k: v for k, v in tokenizer.items() if k != "chat_tokens"},
        "corpus": spec["corpus"],
        "chat": spec["chat"],
    }


def _yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip()


INTRO = (
    "Pretokenized code corpora for LM pretraining (packed `seq_len` sequences with document boundaries in "
    "`doc_lens`), with SFT conversations (ids + loss masks) and multiple-choice eval sets when the spec has "
    "chat sources, built by the Albor Dagster pipeline. Ids are from `tokenizer/` (load it with "
    "`AutoTokenizer.from_pretrained`). Every file is listed with its SHA-256 in `PROVENANCE.md`."
)
LICENCES = (
    "Licences come from each package's metadata or a LICENSE file at the source's root; "
    "`unknown` where neither exists. Check them before redistributing."
)
SETTINGS = (
    "Hygiene: per source, quality filters (long lines, low alphanumeric share, auto-generated and "
    "data-heavy files; for text sources that list them, languages) and secrets/PII redaction "
    "(detect-secrets' detectors, e-mails, public IPs, phone numbers -> `<KEY>`, `<EMAIL>`, `<IP_ADDRESS>`, "
    "`<PHONE_NUMBER>`), counted in PROVENANCE.md; exact and MinHash near-duplicate "
    "deduplication (first source wins), strict UTF-8 and a content-hash holdout with near-duplicate "
    "clusters kept in one split. Train documents sharing a word n-gram with a listed benchmark are "
    "dropped (`decontaminate`); benchmarks not listed are not checked, and redaction misses what no "
    "detector knows."
)
TOKENIZER_TEXT = (
    "ByteLevel BPE trained on the train mix. Bytes per token on the whole val text, against OpenAI's "
    "tokenizers (from their ranks on PyPI) and any baselines the spec lists; per source in PROVENANCE.md."
)
STATISTICS = (
    "Per split and source, from `stats/stats.json` (every figure, with p10/p50/p90/p99 quantiles). "
    "Lengths are of the split's mix, a repeated document counted each time; tokens as packed, with "
    "`</s>` and any FIM sentinels."
)
INTENDED_USE = (
    "Pretraining and supervised fine-tuning of small code language models, and research on data "
    "pipelines. The text is other people's code and documentation under their licences (above); the "
    "synthetic conversations are generated by the pipeline. Not for training on behalf of anyone "
    "without checking those licences, and not as an evaluation benchmark for models trained on it."
)


def _config_lines(built: Built) -> list[str]:
    """The corpora's rows, what their tokens count, and the BOS convention."""
    found = corpora(built)
    if not found:
        return ["No corpus built yet."]
    renders = any(sft_stage(s) in built.stages for s in SPLITS) or any(
        eval_stage(n) in built.stages for n in built.names()
    )
    return [markdown_table(card_corpora(found)), "", CONFIG_TOKENS, "", card_bos(found, renders)]


def render_card(prov: dict[str, Any]) -> str:
    built = Built.of(prov)
    tokenizer = built.summary(TOKENIZER, TokenizerSummary)
    configs, infos = _configs(built)
    header = {
        "license": "other",
        "pretty_name": "Albor pipeline corpus",
        "tags": ["code", "pretraining", "sft", "albor-pipeline"],
        "configs": configs,
        "dataset_info": infos,
    }
    default = configs[0]["config_name"] if configs else "corpus"
    sections = [
        ("Sources and licences", [LICENCES, "", markdown_table(card_sources(built.sources, ingested(built)))]),
        ("Configs", _config_lines(built)),
        ("Size and epochs", card_size(corpora(built)) or ["No train corpus built yet."]),
        ("Tokenizer", [TOKENIZER_TEXT, "", *card_vocab(tokenizer), markdown_table(card_tokenizer(tokenizer))]),
        ("Statistics", [STATISTICS, "", *card_charts(built.summary(STATS, StatsSummary))]),
        ("Settings", [SETTINGS, "", "```yaml", _yaml(_settings(built)), "```"]),
        *([("Removal requests", [applied.sentence()])] if (applied := applied_removals(built)) else []),
        ("Intended use", [INTENDED_USE]),
    ]
    lines = ["---", _yaml(header), "---", "", "# Albor pipeline corpus", "", INTRO, ""]
    lines += ["```python", "from datasets import load_dataset", f'corpus = load_dataset("{{data dir}}", "{default}")']
    lines += ["```", ""]
    for title, body in sections:
        lines += [f"## {title}", "", *body, ""]
    return "\n".join(lines)
