"""The markdown table `python bench/run.py` prints: one row per figure, with its target."""

from __future__ import annotations

from typing import Any


def table(results: dict[str, Any]) -> str:
    s, e, sc = results.get("stages", {}), results.get("end_to_end", {}), results.get("scaling", {})
    rows = []
    if s:  # each section may be absent after `--only` without an earlier full run in --out
        rows += _stage_rows(s)
    if h := results.get("hygiene"):
        rows += _hygiene_rows(h)
    if e:
        rows += [
            ("end to end wall s (default spec)", e["wall_s"], ""),
            ("  sum of stage compute s", e["stages_s"], ""),
            ("  orchestration overhead", f"{e['overhead_pct']} %", "<= 10 %"),
            ("  peak PSS MB, all processes (a shared page counted once)", _mb(e.get("peak_pss_mb")), "<= 1536"),
            ("  peak RSS MB, all processes (summed: shared pages once per process)", e["peak_rss_mb"], ""),
        ]
        mb = e.get("source_mb")
        if mb:
            rows.append(("  source text MB / whole graph MB/s", f"{mb} / {mb / e['wall_s']:.2f}", ""))
        for step, sec in e.get("steps_s", {}).items():
            rows.append((f"  step {step} s", f"{sec} ({mb / sec:.1f} MB/s)" if mb and sec else sec, ""))
    if sc:
        rows += [
            ("scaling 2x/1x: graph wall", sc["graph_wall_ratio"], "~2.0"),
            ("scaling 2x/1x: graph wall without tokenizer training", sc["graph_wall_ratio_without_tokenizer"], "~2.0"),
            ("scaling 2x/1x: graph peak RSS", sc["graph_rss_ratio"], "<= 1.3 (tokenizer aside)"),
            ("scaling 2x/1x: pretokenize wall", sc["pretokenize_wall_ratio"], "~2.0"),
            ("scaling 2x/1x: pretokenize peak RSS", sc["pretokenize_rss_ratio"], "<= 1.3"),
        ]
    if (b := results.get("end_to_end_before")) and (now := b.get("now")):  # older results lack "now"
        rows += _before_rows(b, now)
    if pr := results.get("profile"):
        rows.append((f"py-spy profile of the graph ({pr['samples']:,} samples, all processes)", "", ""))
        rows += [(f"  {m}", f"{pct} %", "") for m, pct in pr["by_module_pct"].items()]
    if le := results.get("ledger"):
        rows += [
            (
                "ledger: graph wall s with / without (default spec)",
                f"{le['wall_with_ledger_s']} / {le['wall_without_ledger_s']}",
                "",
            ),
            ("  ledger cost", f"{le['ledger_cost_pct']} %", "<= 10 %"),
            ("  ledger size MB (share of all outputs)", f"{le['ledger_mb']} ({le['ledger_share_pct']} %)", ""),
            ("  albor trace s: a file / a sequence", f"{le['trace_file_s']} / {le['trace_sequence_s']}", ""),
        ]
    if rb := results.get("rebuild"):
        rows += _rebuild_rows(rb)
    if lo := results.get("loader"):
        rows += _loader_rows(lo)
    if sc2 := results.get("scale"):
        rows += _scale_rows(sc2)
    rows += _cost_targets(results)
    lines = ["| figure | value | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _mb(value: float | None) -> float | str:
    """A memory figure, or "n/a" where it was not measured (no PSS from this kernel, older results)."""
    return "n/a" if value is None else value


def _before_rows(b: dict[str, Any], e: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The graph on the `--before` commit against this checkout's, group by group."""
    rows: list[tuple[str, Any, str]] = [
        (f"graph on {b['commit'][:10]} / this checkout, its spec: wall s", f"{b['wall_s']} / {e['wall_s']}", ""),
        ("  ratio (now / before)", round(e["wall_s"] / b["wall_s"], 2), "<= 0.5"),
        ("  orchestration overhead before", f"{b['overhead_pct']} %", ""),
        ("  peak PSS MB before / now, all processes", f"{_mb(b.get('peak_pss_mb'))} / {_mb(e.get('peak_pss_mb'))}", ""),
        ("  peak RSS MB before, all processes summed", b["peak_rss_mb"], ""),
    ]
    for group, sec in b["groups_s"].items():
        now = e["groups_s"].get(group, 0.0)
        rows.append((f"  group {group} s (before / now)", f"{sec} / {now} = {now / sec:.2f}x" if sec else now, ""))
    if pr := b.get("profile"):
        rows.append((f"py-spy profile before ({pr['samples']:,} samples)", "", ""))
        rows += [(f"  {m}", f"{pct} %", "") for m, pct in pr["by_module_pct"].items()]
    return rows


def _scale_rows(sc: dict[str, Any]) -> list[tuple[str, Any, str]]:
    rows: list[tuple[str, Any, str]] = []
    for label in ("1x", "2x"):
        local, ray = sc[f"{label}_local"], sc[f"{label}_ray"]
        rows.append((f"scale {label}: {local['source_mb']} MB, {sc['workers']} workers", "", ""))
        for name, r in (("local", local), ("ray", ray)):
            rows.append(
                (
                    f"  {name}: wall s / tree peak RSS MB (summed) / largest process MB (private)",
                    f"{r['wall_s']} / {r['peak_rss_mb']} / {r['peak_process_rss_mb']} ({r['peak_process_private_mb']})",
                    "",
                )
            )
        rows.append(("  Ray overhead (wall)", f"{sc[f'{label}_ray_overhead_pct']} %", "<= 15 %"))
    for label in ("1x", "2x"):
        local = sc[f"{label}_local"]
        rows.append((f"scale {label} local: task s / step s", f"{local['task_s']} / {local['stages_s']}", ""))
    for where, t in sc["1x_local"]["tasks"].items():
        rows.append(
            (
                f"tasks 1x {where}: n / p50 / p90 / max s / total s",
                f"{t['tasks']} / {t['p50_s']} / {t['p90_s']} / {t['max_s']} / {t['total_s']}",
                "",
            )
        )
    for name in ("local", "ray"):
        rows.append((f"scale 2x/1x {name}: wall", sc[f"{name}_wall_ratio"], "<= 2.1"))
        rows.append((f"scale 2x/1x {name}: largest process RSS", sc[f"{name}_process_rss_ratio"], "~1.0"))
        rows.append((f"scale 2x/1x {name}: its private memory (RssAnon)", sc[f"{name}_process_private_ratio"], "~1.0"))
    return rows


def _loader_rows(lo: dict[str, Any]) -> list[tuple[str, Any, str]]:
    rows: list[tuple[str, Any, str]] = [
        (f"loader: {lo['loader_sequences']:,} sequences of {lo['loader_seq_len']}", "", ""),
        (
            "  bare np.memmap seq/s (sequential / shuffled)",
            f"{lo['bare_memmap_sequential_seq_s']:,} / {lo['bare_memmap_shuffled_seq_s']:,}",
            "",
        ),
    ]
    for source in ("parquet", "tokens"):
        rows.append(
            (
                f"  Batches over {source} seq/s (sequential / shuffled)",
                f"{lo[f'{source}_sequential_seq_s']:,} / {lo[f'{source}_shuffled_seq_s']:,} "
                f"= {lo[f'{source}_sequential_vs_bare']}x / {lo[f'{source}_shuffled_vs_bare']}x bare",
                "",
            )
        )
    if "bucket_cold_seq_s" in lo:
        rows.append(
            (
                f"  Batches over parquet in a bucket ({lo['bucket_corpus_mb']} MB, moto S3 on loopback) seq/s: "
                "cold cache / warm cache / local",
                f"{lo['bucket_cold_seq_s']:,} / {lo['bucket_warm_seq_s']:,} / {lo['bucket_local_seq_s']:,} "
                f"= {lo['bucket_cold_vs_local']}x / {lo['bucket_warm_vs_local']}x local",
                "",
            )
        )
    if "dataloader_2_workers_bare_seq_s" in lo:
        rows.append(
            (
                "  torch DataLoader, 2 workers, bare memmap dataset seq/s",
                f"{lo['dataloader_2_workers_bare_seq_s']:,}",
                "",
            )
        )
        for source in ("parquet", "tokens"):
            rows.append(
                (
                    f"  torch DataLoader, 2 workers, Batches over {source} seq/s",
                    f"{lo[f'dataloader_2_workers_{source}_seq_s']:,} "
                    f"= {lo[f'dataloader_2_workers_{source}_vs_bare']}x bare",
                    "",
                )
            )
    rows.append(
        (
            "  first batch after resume at mid-epoch / fresh (ms)",
            f"{lo['resume_first_batch_ms']} / {lo['fresh_first_batch_ms']}",
            "",
        )
    )
    return rows


def _hygiene_rows(h: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [
        ("hygiene corpus (text MB)", h["corpus_mb"], ""),
        ("filters + redaction stage MB/s (2 processes)", h["hygiene_mb_s"], ""),
        ("redaction alone MB/s (1 process)", h["redaction_1proc_mb_s"], ""),
        (
            "documents with near dedup s (ours / datatrove MinHash)",
            f"{h['near_dedup_s']} / {h['datatrove_minhash_s']} = {h['near_dedup_vs_datatrove']}x faster"
            if "datatrove_minhash_s" in h
            else h.get("datatrove_minhash"),
            ">= 1.5x",
        ),
        (
            "  documents removed (ours exact + near / datatrove)",
            f"{h['near_dedup_removed']} / {h.get('datatrove_minhash_removed', '-')} of {h['near_dedup_documents']}",
            "",
        ),
    ]


def _adversarial_rows(adv: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """One long run vs a code file of the same size: encoding alone, and training on 1 MB code + it."""
    rows: list[tuple[str, Any, str]] = []
    for name, r in adv.items():
        if "encode_vs_code" not in r:
            continue
        tk = r["tiktoken_s"] if isinstance(r["tiktoken_s"], str) else f"{r['tiktoken_s'] * 1e3:.1f} ms"
        encode = f"{r['encode_vs_code']}x ({r['encode_s'] * 1e3:.2f} ms; bare tiktoken {tk})"
        rows.append((f"adversarial {name}: encode vs code", encode, "<= 3x"))
        rows.append((f"adversarial {name}: training vs code", f"{r['train_vs_code']}x ({r['train_s']:.2f} s)", "<= 3x"))
    return rows


def _stage_rows(s: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [
        ("corpus (text MB)", s["corpus_mb"], ""),
        ("ingest MB/s", s["ingest_mb_s"], ""),
        ("documents (dedup + holdout) MB/s", s["documents_mb_s"], ""),
        ("mix MB/s", s["mix_mb_s"], ""),
        ("FIM MB/s", s["fim_mb_s"], ""),
        (
            f"tokenizer training s (ours: {s.get('tokenizer_trainer', 'hf')} / bare HF BpeTrainer)",
            f"{s['tokenizer_train_s']} / {s['tokenizer_bare_train_s']} = {s['tokenizer_train_ratio']}x",
            "<= 0.5",
        ),
        (
            "  val bytes/token (ours / bare HF BpeTrainer)",
            f"{s.get('tokenizer_ours_val_bytes_per_token')} / {s.get('tokenizer_bare_val_bytes_per_token')}",
            "within 1 %",
        ),
        (
            f"pretokenize stage MB/s (encoder: {s.get('pretokenize_encoder', 'tiktoken')})",
            s["pretokenize_stage_mb_s"],
            "",
        ),
        (
            "  vs bare HF encode_batch_fast",
            f"{s['pretokenize_vs_hf']}x ({s['bare_hf_encode_batch_fast_mb_s']} MB/s)",
            ">= 2.0x",
        ),
        (
            "  vs bare tiktoken (GPT-2 pattern as tiktoken ships it)",
            f"{s['pretokenize_vs_tiktoken']}x ({s['bare_tiktoken_mb_s']} MB/s)",
            "",
        ),
        (
            "  vs bare tiktoken with the faster pattern spelling",
            f"{s['pretokenize_vs_tiktoken_fast_pattern']}x ({s['bare_tiktoken_fast_pattern_mb_s']} MB/s)",
            ">= 3x",
        ),
        (
            "  vs bare gigatoken (encode only)",
            f"{s['pretokenize_vs_gigatoken']}x ({s['bare_gigatoken_mb_s']} MB/s)" if "bare_gigatoken_mb_s" in s else "",
            ">= 0.3x",
        ),
        *_small_split_rows(s.get("pretokenize_60mb")),
        (
            "  vs datatrove DocumentTokenizer",
            f"{s['pretokenize_vs_datatrove']}x ({s['datatrove_s']} s)" if "datatrove_s" in s else s.get("datatrove"),
            ">= 4x",
        ),
        *_adversarial_rows(s.get("adversarial", {})),
    ]


def _small_split_rows(small: dict[str, Any] | None) -> list[tuple[str, Any, str]]:
    """The pretokenize stage on the split's first ~60 MB, where fixed costs show."""
    if not small:
        return []
    return [
        (f"pretokenize stage MB/s on the first {small['pretokenize_mb']} MB", small["pretokenize_stage_mb_s"], ""),
        (
            "  vs bare tiktoken with the faster pattern spelling",
            f"{small['pretokenize_vs_tiktoken_fast_pattern']}x ({small['bare_tiktoken_fast_pattern_mb_s']} MB/s)",
            ">= 3x",
        ),
        (
            "  vs bare gigatoken (encode only)",
            f"{small['pretokenize_vs_gigatoken']}x ({small['bare_gigatoken_mb_s']} MB/s)",
            ">= 0.3x",
        ),
    ]


def _rebuild_rows(rb: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """A one-file edit's rebuild and a killed run's resume against a cold build, per spec."""
    rows: list[tuple[str, Any, str]] = []
    for spec, r in rb.items():
        rows += [
            (f"rebuild ({spec} spec): cold build wall s", r["cold_wall_s"], ""),
            *(
                [("  nothing changed, all materialized: wall s / ratio", f"{u['wall_s']} / {u['ratio']}", "")]
                if (u := r.get("unchanged"))
                else []
            ),
            (
                "  one-file edit, tokenizer kept: wall s / ratio",
                f"{r['kept']['wall_s']} / {r['kept']['ratio']}",
                "<= 0.25",
            ),
            (
                "  one-file edit, tokenizer retrained: wall s / ratio",
                f"{r['retrained']['wall_s']} / {r['retrained']['ratio']}",
                "<= 0.5",
            ),
            (
                f"  killed at {r['resume']['killed_after_tasks']} corpus/train tasks, the rest: wall s / ratio",
                f"{r['resume']['wall_s']} / {r['resume']['ratio']}",
                "<= 0.3",
            ),
        ]
    return rows


SMALL_SPLIT_STEPS = ("mixed__val", "mixed__test", "fim__val", "fim__test", "corpus__val", "corpus__test")
"""The default spec's 500-row val and 200-row test steps: no fixed waste means each under a second."""


def _task_s(tasks: dict[str, Any], asset: str, fn: str) -> float:
    """Task-seconds of task function `fn` summed over the assets (or checks) starting `asset`."""
    return sum(t["total_s"] for key, t in tasks.items() if key.startswith(asset) and key.endswith(f" {fn}"))


def _cost_targets(results: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Issue 33's cost targets, each figure beside its target: the default graph against the
    `--before` commit in the same run, and the per-MB costs of the scale section."""
    rows: list[tuple[str, Any, str]] = []
    b = results.get("end_to_end_before")
    e = b.get("now") if b else None  # this checkout on the same (the earlier commit's) spec
    if b and e:
        for step in SMALL_SPLIT_STEPS:
            if step in e["steps_s"]:
                rows.append((f"cost: step {step} s (before {b['steps_s'].get(step, '-')})", e["steps_s"][step], "<= 1"))
        now, before = _task_s(e["tasks"], "filtered", "_clean_shard"), _task_s(b["tasks"], "filtered", "_clean_shard")
        if now and before:
            rows.append(
                (
                    "cost: hygiene task-s per core, before / now",
                    f"{before:.2f} / {now:.2f} = {before / now:.2f}x",
                    ">= 3x",
                )
            )
        check = "documents_no_near_leak"
        if check in e["steps_s"] and check in b["steps_s"]:
            ratio = round(e["steps_s"][check] / b["steps_s"][check], 3)
            rows.append(
                (
                    f"cost: near-dup leak check s, now / before ({e['steps_s'][check]} / {b['steps_s'][check]})",
                    ratio,
                    "<= 0.2",
                )
            )
    if sc := results.get("scale"):
        one, two = sc["1x_local"], sc["2x_local"]
        rows.append(
            (
                "cost: task-s per MB of sources (1x / 2x, local)",
                f"{one['task_s'] / one['source_mb']:.3f} / {two['task_s'] / two['source_mb']:.3f}",
                "<= 0.2",
            )
        )
        own = [r["stages_s"] - r["task_s"] / sc["workers"] for r in (one, two)]
        serial = (own[1] - own[0]) / (two["source_mb"] - one["source_mb"])
        rows.append(
            (f"cost: the run's own s per MB (({own[1]:.1f} - {own[0]:.1f}) s / MB added)", f"{serial:.4f}", "<= 0.005")
        )
    return rows
