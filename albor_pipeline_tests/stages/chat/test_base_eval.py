"""Base-model eval sets: nanochat's CORE rendering, tokenized with their continuation spans."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from jinja2 import Template
from tokenizers import Tokenizer

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import REPO_ROOT, ChatTokens, SourceSpec
from albor_pipeline.stages.chat.base_eval import build_base_eval, check_continuations
from albor_pipeline.stages.chat.sft import build_eval
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.base_eval import BaseTask, fewshot, render_prompts
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.vocab import BOS, plain_tokenizer

from .test_chat import chat_tok  # noqa: F401  (the module's tokenizer fixture)

SAMPLES = REPO_ROOT / "data" / "samples" / "base_eval"
SETS = {
    BaseTask.multiple_choice: ("mc.jsonl", 3),
    BaseTask.schema: ("schema.jsonl", 2),
    BaseTask.language_modeling: ("lm.jsonl", 1),
}

# nanochat's templates (core_eval.py), rendered with jinja2 as nanochat renders them: the oracle.
NANOCHAT = {
    BaseTask.multiple_choice: """
{%- for example in fewshot_examples -%}
{{ example.query }}{{ continuation_delimiter }}{{ example.choices[example.gold] }}

{% endfor -%}
{{ item.query }}{{ continuation_delimiter }}{{ choice }}""".strip(),
    BaseTask.schema: """
{%- for example in fewshot_examples -%}
{{ example.context_options[example.gold] }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ context }}{{ continuation_delimiter }}{{ item.continuation }}""".strip(),
    BaseTask.language_modeling: (
        """
{%- for example in fewshot_examples -%}
{{ example.context | trim }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ item.context | trim }}{{ continuation_delimiter }}"""
        + """{% if include_continuation %}{{ item.continuation }}{% endif %}"""
    ).strip(),
}


def _nanochat_prompts(item: dict, task: BaseTask, delimiter: str, shots: list[dict]) -> list[str]:
    template = Template(NANOCHAT[task])
    context = {"fewshot_examples": shots, "continuation_delimiter": delimiter, "item": item}
    if task is BaseTask.multiple_choice:
        return [template.render(choice=c, **context) for c in item["choices"]]
    if task is BaseTask.schema:
        return [template.render(context=c, **context) for c in item["context_options"]]
    return [
        template.render(include_continuation=False, **context).strip(),
        template.render(include_continuation=True, **context),
    ]


@pytest.mark.parametrize("task", list(BaseTask))
def test_prompts_are_nanochats_character_for_character(task):
    name, shots = SETS[task]
    items = [json.loads(line) for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines()]
    assert len(items) > 20
    for delimiter in (" ", "\n", " => "):
        for i, item in enumerate(items):
            drawn = [items[j] for j in fewshot(i, len(items), shots)]
            assert i not in fewshot(i, len(items), shots) and len(drawn) == shots
            assert render_prompts(item, task, delimiter, drawn) == _nanochat_prompts(item, task, delimiter, drawn)


@pytest.mark.parametrize("task", list(BaseTask))
def test_sets_tokenize_with_spans_that_decode_to_the_answers(chat_tok, tmp_path, task):  # noqa: F811
    name, shots = SETS[task]
    src = SourceSpec(name="b", kind="base_eval", path=SAMPLES / name, task_type=task, num_fewshot=shots)
    ingest_source(src, tmp_path / "in", StageIO(tmp_path))
    out = tmp_path / "eval.parquet"
    result = build_base_eval(tmp_path / "in", chat_tok[0], task, shots, " ", "auto", out, StageIO(tmp_path))
    again = build_base_eval(
        tmp_path / "in", chat_tok[0], task, shots, " ", "hf", tmp_path / "b.parquet", StageIO(tmp_path)
    )
    assert result.artifact.sha256 == again.artifact.sha256  # same bytes from either encoder
    rows = pq.read_table(out).to_pylist()
    tok = Tokenizer.from_file(str(chat_tok[0]))
    plain = plain_tokenizer(tok)
    items = [json.loads(r["item"]) for r in rows]
    for row, item in zip(rows, items):
        prompts = _nanochat_prompts(item, task, " ", [items[j] for j in row["fewshot"]])
        expected = [[tok.token_to_id(BOS), *plain.encode(p, add_special_tokens=False).ids] for p in prompts]
        if task is BaseTask.language_modeling:  # scored on the prompt with the continuation
            assert row["starts"] == [len(expected[0])] and row["input_ids"] == expected[1:]
        else:
            assert row["input_ids"] == expected
            assert len(set(row["starts"])) == 1 or task is BaseTask.schema  # choices share their context
        answers = {
            BaseTask.multiple_choice: item.get("choices"),
            BaseTask.schema: [item.get("continuation")] * len(row["input_ids"]),
            BaseTask.language_modeling: [item.get("continuation")],
        }[task]
        for ids, start, end, answer in zip(row["input_ids"], row["starts"], row["ends"], answers):
            span = plain.decode(ids[start:end])
            assert end == len(ids) and span.strip() and (answer.endswith(span.strip()) or span.endswith(answer))
    outcome = check_continuations(out, chat_tok[0], task, " ")
    assert outcome.passed, outcome.metadata
    assert result.summary.items == len(rows) and result.summary.num_fewshot == shots
    # A span moved by one token, or a prompt that is not its item's, fails the check.
    broken = [dict(r) for r in rows]
    broken[0]["starts"] = [s + 1 for s in broken[0]["starts"]]
    broken[1]["input_ids"] = [ids[:-1] + ids[-2:-1] for ids in broken[1]["input_ids"]]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pq.read_table(out).from_pylist(broken, schema=pq.read_schema(out)), bad)
    failed = check_continuations(bad, chat_tok[0], task, " ")
    assert not failed.passed and failed.metadata["bad"] == 2


def test_malformed_items_name_file_and_line(tmp_path):
    bad_rows = [
        (BaseTask.multiple_choice, {"query": "q", "choices": ["a"], "gold": 0}, "choices must be a list of 2"),
        (BaseTask.multiple_choice, {"query": "q", "choices": ["a", "b"], "gold": 2}, "gold must be an index"),
        (BaseTask.schema, {"context_options": ["a", "b"], "gold": 0}, "continuation must be a non-empty string"),
        (BaseTask.language_modeling, {"context": "", "continuation": "x"}, "context must be a non-empty string"),
    ]
    for i, (task, row, message) in enumerate(bad_rows):
        path = tmp_path / f"b{i}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(IngestError, match=rf"b{i}.jsonl:1: {message}"):
            ingest_source(
                SourceSpec(name="b", kind="base_eval", path=path, task_type=task), tmp_path / "o", StageIO(tmp_path)
            )
    with pytest.raises(ValueError, match="task_type: required for kind base_eval"):
        SourceSpec(name="b", kind="base_eval", path=tmp_path)
    path = tmp_path / "few.jsonl"
    path.write_text(json.dumps({"context": "a b", "continuation": "c"}) + "\n")
    ingest_source(
        SourceSpec(name="f", kind="base_eval", path=path, task_type="language_modeling"),
        tmp_path / "f",
        StageIO(tmp_path),
    )
    with pytest.raises(ValueError, match="num_fewshot 1 needs more than 1 items"):
        build_base_eval(
            tmp_path / "f",
            REPO_ROOT,
            BaseTask.language_modeling,
            1,
            " ",
            "auto",
            tmp_path / "x.parquet",
            StageIO(tmp_path),
        )


# One of each: a GitHub token, an e-mail, a public IP and a phone number with its country code.
PLANTED = ("ghp_" + "Xy7Kq2Lm9Np4Rs6Tv8Wz1Ab3Cd5Ef7Gh9Ij0", "jane.roe@mailhost.net", "45.33.101.17", "+1 650-253-0000")
PLACEHOLDERS = ("<KEY>", "<EMAIL>", "<IP_ADDRESS>", "<PHONE_NUMBER>")
LEAKY = 'see {0} "or" mail {1} \\ at {2} now, call {3} today'  # a quote and a backslash: JSON escapes
EVAL_SOURCES = {  # (kind, task_type): an item (as stored) with `s` in every text field but labels
    ("mc", None): lambda s: {"question": s, "choices": [s, "b", s], "labels": ["x", "y", "z"], "answer": 1},
    ("base_eval", BaseTask.multiple_choice): lambda s: {"query": s, "choices": [s, "b", s], "gold": 1},
    ("base_eval", BaseTask.schema): lambda s: {"context_options": [s, "b"], "continuation": s, "gold": 0},
    ("base_eval", BaseTask.language_modeling): lambda s: {"context": s, "continuation": s},
}


@pytest.mark.parametrize(("kind", "task"), list(EVAL_SOURCES))
def test_eval_sources_lose_secrets_and_pii_at_ingest(chat_tok, tmp_path, kind, task):  # noqa: F811
    """An eval set has no hygiene stage: its items' secrets and PII are redacted at ingest, in every
    text field, so neither `item` nor the decoded `input_ids` of `eval/<name>` holds one."""
    item_of = EVAL_SOURCES[kind, task]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(item_of(f"{LEAKY.format(*PLANTED)} {i}")) + "\n" for i in range(3)))
    src = SourceSpec(name="e", kind=kind, path=path, task_type=task)
    ingested = ingest_source(src, tmp_path / "in", StageIO(tmp_path))
    out = tmp_path / "eval.parquet"
    if task is None:
        build_eval(tmp_path / "in", chat_tok[0], ChatTokens(), "auto", out, StageIO(tmp_path))
    else:
        build_base_eval(tmp_path / "in", chat_tok[0], task, 0, " ", "auto", out, StageIO(tmp_path))
    tok = Tokenizer.from_file(str(chat_tok[0]))
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 3
    for i, row in enumerate(rows):
        # Each field redacted on its own: valid JSON, the item's shape, the text around each finding.
        assert json.loads(row["item"]) == item_of(f"{LEAKY.format(*PLACEHOLDERS)} {i}")
        ids = row["input_ids"] if task else [row["input_ids"]]  # a base-eval row: a sequence per choice
        for text in (row["item"], *(tok.decode(seq, skip_special_tokens=False) for seq in ids)):
            assert not any(value in text for value in PLANTED)
    fields = 3 * json.dumps(item_of("@@")).count("@@")  # every leaky field of the 3 items
    kinds = ("GitHub Token", "E-mail", "IP address", "Phone number")
    assert ingested.summary.secrets == dict.fromkeys(kinds, fields)
    # `report` keeps the items as they are and still counts what they hold (no hygiene stage would).
    report = SourceSpec(name="e", kind=kind, path=path, task_type=task, hygiene={"redact": "report"})
    counted = ingest_source(report, tmp_path / "report", StageIO(tmp_path))
    assert counted.summary.secrets == ingested.summary.secrets
    assert all(PLANTED[0] in text for text in pq.read_table(tmp_path / "report").column("text").to_pylist())
