"""The dataset card (`README.md` at the data dir's root), written from provenance.json.

Its YAML header is a Hugging Face dataset card: `datasets.load_dataset(data_dir, name)`
finds each config (the corpora, the long subsets, SFT, eval sets) and its features. The
text states sources with their licences, the settings of every stage and intended use:
the same facts as PROVENANCE.md, never a second record.
"""

from __future__ import annotations

from typing import Any

import yaml

from albor_pipeline.runtime.layout import (
    corpus_names,
    corpus_stage,
    eval_stage,
    filtered_stage,
    ingested_stage,
    sft_stage,
)
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.spec import SPLITS

HF_SPLIT = {"train": "train", "val": "validation", "test": "test"}
CORPUS_FEATURES = [
    {"name": "input_ids", "sequence": "uint32"},
    {"name": "doc_lens", "sequence": "uint32"},
]
SFT_FEATURES = [
    {"name": "input_ids", "sequence": "uint32"},
    {"name": "loss_mask", "sequence": "uint8"},
    {"name": "source", "dtype": "string"},
    {"name": "sha256", "dtype": "string"},
    {"name": "messages", "dtype": "string"},
]
EVAL_FEATURES = [
    {"name": "input_ids", "sequence": "uint32"},
    {"name": "choice_token_ids", "sequence": "uint32"},
    {"name": "answer", "dtype": "int32"},
    {"name": "sha256", "dtype": "string"},
    {"name": "item", "dtype": "string"},
]


def _configs(prov: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(configs with their data files, dataset_info with their features) of what was built."""
    stages = prov["stages"]
    configs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []

    def add(name: str, files: list[tuple[str, str]], features: list[dict[str, str]]) -> None:
        if files:
            configs.append({"config_name": name, "data_files": [{"split": s, "path": p} for s, p in files]})
            infos.append({"config_name": name, "features": [dict(f) for f in features]})  # no YAML anchors

    for prefix, names in (("corpus", list(SPLITS)), ("corpus_long", corpus_names(SPLITS)[len(SPLITS) :])):
        files = [
            (HF_SPLIT[n.removeprefix("long_")], f"corpus/{n}/part-*.parquet")
            for n in names
            if stages.get(corpus_stage(n), {}).get("summary", {}).get("sequences")
        ]
        add(prefix, files, CORPUS_FEATURES)
    sft = [(HF_SPLIT[s], f"sft/{s}/part-*.parquet") for s in SPLITS if sft_stage(s) in stages]
    add("sft", sft, SFT_FEATURES)
    for src in prov["spec"]["sources"]:
        if eval_stage(src["name"]) in stages:
            add(f"eval_{src['name']}", [("test", f"eval/{src['name']}.parquet")], EVAL_FEATURES)
    if configs:
        configs[0]["default"] = True
    return configs, infos


def _licence(summary: dict[str, Any]) -> str:
    licences = summary.get("licences") or {"unknown": 1}
    if len(licences) == 1:
        return next(iter(licences))
    top = sorted(licences.items(), key=lambda kv: -kv[1])
    return f"{sum(licences.values())} packages: " + ", ".join(f"{k} ({v})" for k, v in top)


def render_card(prov: dict[str, Any]) -> str:
    stages, spec = prov["stages"], prov["spec"]
    configs, infos = _configs(prov)
    header = {
        "license": "other",
        "pretty_name": "Albor pipeline corpus",
        "tags": ["code", "pretraining", "sft", "albor-pipeline"],
        "configs": configs,
        "dataset_info": infos,
    }
    sources = [
        {
            "source": s["name"],
            "kind": s["kind"],
            "path": f"`{s['path']}`",
            "documents": stages.get(ingested_stage(s["name"]), {}).get("summary", {}).get("documents", ""),
            "licence": _licence(stages.get(ingested_stage(s["name"]), {}).get("summary", {})),
        }
        for s in spec["sources"]
    ]
    corpora = [
        {
            "config": "corpus_long" if n.startswith("long_") else "corpus",
            "split": HF_SPLIT[n.removeprefix("long_")],
            "seq_len": s["config"]["seq_len"],
            "sequences": s["summary"]["sequences"],
            "tokens": s["summary"]["tokens"],
            "documents": s["summary"]["documents"],
        }
        for n in corpus_names(SPLITS)
        if (s := stages.get(corpus_stage(n)))
    ]
    tok = stages.get("tokenizer", {})
    settings = {
        "hygiene": {s["name"]: s["hygiene"] for s in spec["sources"] if filtered_stage(s["name"]) in stages},
        "holdout": spec["holdout"],
        "near_dedup": spec.get("near_dedup"),
        "decontaminate": spec.get("decontaminate"),
        "mix": spec["mix"],
        "fim": spec["fim"],
        "tokenizer": {k: v for k, v in tok.get("config", {}).items() if k != "chat_tokens"},
        "corpus": spec["corpus"],
        "chat": spec["chat"],
    }
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        "# Albor pipeline corpus",
        "",
        "Pretokenized code corpora for LM pretraining (packed `seq_len` sequences with document boundaries in "
        "`doc_lens`), with SFT conversations (ids + loss masks) and multiple-choice eval sets when the spec has "
        "chat sources, built by the Albor Dagster pipeline. Ids are from `tokenizer/` (load it with "
        "`AutoTokenizer.from_pretrained`). Every file is listed with its SHA-256 in `PROVENANCE.md`.",
        "",
        "```python",
        "from datasets import load_dataset",
        f'corpus = load_dataset("{{data dir}}", "{configs[0]["config_name"] if configs else "corpus"}")',
        "```",
        "",
        "## Sources and licences",
        "",
        "Licences come from each package's metadata or a LICENSE file at the source's root; "
        "`unknown` where neither exists. Check them before redistributing.",
        "",
        markdown_table(sources),
        "",
        "## Configs",
        "",
        markdown_table(corpora) or "No corpus built yet.",
        "",
        "## Settings",
        "",
        "Hygiene: per source, quality filters (long lines, low alphanumeric share, auto-generated and "
        "data-heavy files) and secrets/PII redaction (detect-secrets' detectors, e-mails, public IPs -> "
        "`<KEY>`, `<EMAIL>`, `<IP_ADDRESS>`), counted in PROVENANCE.md; exact and MinHash near-duplicate "
        "deduplication (first source wins), strict UTF-8 and a content-hash holdout with near-duplicate "
        "clusters kept in one split. Train documents sharing a word n-gram with a listed benchmark are "
        "dropped (`decontaminate`); benchmarks not listed are not checked, and redaction misses what no "
        "detector knows.",
        "",
        "```yaml",
        yaml.safe_dump(settings, sort_keys=False, allow_unicode=True).rstrip(),
        "```",
        "",
        "## Intended use",
        "",
        "Pretraining and supervised fine-tuning of small code language models, and research on data "
        "pipelines. The text is other people's code and documentation under their licences (above); the "
        "synthetic conversations are generated by the pipeline. Not for training on behalf of anyone "
        "without checking those licences, and not as an evaluation benchmark for models trained on it.",
        "",
    ]
    return "\n".join(lines)
