"""Hostile input (issue 37): a spec value that would fail a stage later, or silently, is refused
when the spec loads, naming its key; a data dir in a bucket repairs an object changed behind
the pipeline's back."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from albor_pipeline.spec import (
    MAX_CHARS_PER_TOKEN,
    MAX_NAME_CHARS,
    MAX_REPEAT,
    MAX_ROWS,
    MAX_SEQ_LEN,
    MAX_SPLIT_CHARS,
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
    MAX_WORKERS,
    MAX_YAML_DEPTH,
    ChatTokens,
    SpecError,
    apply_overrides,
    load_spec,
    parse_spec,
    path_variables,
)
from albor_pipeline.stages.corpus.pack import PACK_SEQUENCES
from albor_pipeline.text.vocab import FIM_TOKENS
from albor_pipeline_tests.support import small_spec_dict, write_spec


def _set(raw: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """`raw` with `value` at the dotted key (list items by index), made on the way."""
    *parents, last = dotted.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[int(last) if isinstance(node, list) else last] = value
    return raw


def _refused(raw: dict[str, Any], tmp_path: Path) -> str:
    with pytest.raises(SpecError) as err:
        parse_spec(raw, tmp_path)
    return str(err.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mix.train.weights.stdlib_json_email", math.inf),  # passed `> 0`; the mix died on int(nan)
        ("mix.train.weights.stdlib_json_email", math.nan),
        ("mix.val.repeat.stdlib_async", math.inf),
        ("shard_mb", math.inf),
        ("sources.0.hygiene.rules.starcoder.max_mean_line_length", math.inf),
        ("near_dedup.threshold", -math.inf),
    ],
)
def test_a_non_finite_number_is_refused_naming_its_key(tmp_path, key, value):
    raw = small_spec_dict()
    if ".weights." in key:
        raw["mix"]["train"]["weights"] = {"stdlib_json_email": 1.0, "stdlib_async": 1.0}
    message = _refused(_set(raw, key, value), tmp_path)
    where = key.replace(".0.", "[0].")
    assert message.startswith(f"{where}: Input should be a finite number"), message


def test_inf_written_in_yaml_or_a_run_config_override_is_refused(tmp_path):
    """The hostile spec as written (YAML's `.inf`), and the same value as a launchpad override."""
    raw = small_spec_dict()
    raw["mix"]["train"]["weights"] = {"stdlib_json_email": 0.7, "stdlib_async": 0.3}
    text = write_spec(tmp_path / "spec.yaml", raw).read_text(encoding="utf-8")
    path = tmp_path / "inf.yaml"
    path.write_text(text.replace("stdlib_json_email: 0.7", "stdlib_json_email: .inf"), encoding="utf-8")
    with pytest.raises(SpecError, match=r"mix\.train\.weights\.stdlib_json_email: Input should be a finite number"):
        load_spec(path)
    train = load_spec(tmp_path / "spec.yaml").mix.train
    with pytest.raises(SpecError, match=r"^mix\.train: weights\.stdlib_async: Input should be a finite number"):
        apply_overrides(train, {"weights": {"stdlib_json_email": 1.0, "stdlib_async": math.inf}}, "mix.train")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tokenizer.vocab_size", 10**9, f"less than or equal to {MAX_VOCAB_SIZE}"),
        ("corpus.seq_len", 10**11, f"less than or equal to {MAX_SEQ_LEN}"),
        ("corpus.long.seq_len", MAX_SEQ_LEN + 1, f"less than or equal to {MAX_SEQ_LEN}"),
        ("shard_mb", 1e13, "less than or equal to"),  # its bytes overflow int64 in the mix
        ("mix.train.seed", -1, "greater than or equal to 0"),  # numpy's generator refuses it
        ("mix.train.repeat.stdlib_async", 1e15, f"less than or equal to {MAX_REPEAT}"),  # 483 PiB of rows
        ("mix.train.tokens", 10**29, f"less than or equal to {MAX_TOKENS}"),
        ("mix.train.chars", 10**29, f"less than or equal to {MAX_SPLIT_CHARS}"),
        ("mix.val.rows", 10**15, f"less than or equal to {MAX_ROWS}"),
        ("mix.train.chars_per_token", 1e300, f"less than or equal to {MAX_CHARS_PER_TOKEN}"),
        ("execution.workers", 100_000, f"less than or equal to {MAX_WORKERS}"),  # processes
    ],
)
def test_a_size_beyond_what_the_stages_can_store_is_refused_naming_key_and_limit(tmp_path, key, value, message):
    got = _refused(_set(small_spec_dict(), key, value), tmp_path)
    assert got.startswith(f"{key}: Input should be {message}"), got


def test_the_largest_budget_allowed_fits_int64(tmp_path):
    raw = small_spec_dict()
    raw["mix"]["train"].update(tokens=MAX_TOKENS, chars_per_token=MAX_CHARS_PER_TOKEN)
    budget = parse_spec(raw, tmp_path).mix.train.budget_chars
    assert budget is not None and np.iinfo(np.int64).max > budget >= MAX_TOKENS * MAX_CHARS_PER_TOKEN


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mix.train.weights.stdlib_async", True),  # pydantic read it as weight 1.0
        ("mix.val.repeat.stdlib_async", True),
        ("corpus.seq_len", True),
        ("holdout.val_fraction", False),
        ("execution.workers", True),
    ],
)
def test_a_boolean_is_no_number(tmp_path, key, value):
    raw = small_spec_dict()
    if ".weights." in key:
        raw["mix"]["train"]["weights"] = {"stdlib_json_email": 1.0}
    message = _refused(_set(raw, key, value), tmp_path)
    assert message == f"{key}: expected a number, got {str(value).lower()}"


def test_a_source_name_is_short_and_plain(tmp_path):
    """A name becomes directory names and asset keys: 300 characters passed, and failed at the
    first file written under it."""
    raw = small_spec_dict()
    raw["sources"][0]["name"] = "a" * 300
    assert _refused(raw, tmp_path) == f"sources[0].name: String should have at most {MAX_NAME_CHARS} characters"
    raw["sources"][0]["name"] = "a" * MAX_NAME_CHARS
    assert parse_spec(raw, tmp_path).sources[0].name == "a" * MAX_NAME_CHARS
    raw["sources"][0]["name"] = "../x"
    assert _refused(raw, tmp_path).startswith("sources[0].name: String should match pattern")


@pytest.mark.parametrize(("key", "token"), [("user_start", "</s>"), ("python_end", "<|fim_middle|>")])
def test_a_chat_token_that_is_already_a_special_token_is_a_spec_error(tmp_path, key, token):
    """Before, the spec loaded and the tokenizer stage failed with an error about its vocabulary."""
    message = _refused(small_spec_dict(chat={"tokens": {key: token}}), tmp_path)
    assert message.startswith(f"chat.tokens: {key}: {token!r} is already a special token of the tokenizer")


def test_pack_plus_one_without_packing_is_a_spec_error(tmp_path):
    """Before, `chat.pack_plus_one: true` with `packing: none` loaded and was silently ignored."""
    message = _refused(small_spec_dict(chat={"pack_plus_one": True}), tmp_path)
    assert message.startswith("chat: pack_plus_one: true needs packing: best_fit (packing: none"), message
    spec = parse_spec(small_spec_dict(chat={"pack_plus_one": True, "packing": "best_fit"}), tmp_path)
    assert spec.chat.row_tokens == spec.chat.max_tokens + 1


def test_a_file_url_is_its_local_path(tmp_path):
    raw = small_spec_dict()
    raw["sources"][0]["path"] = (tmp_path / "src dir").as_uri()  # file:///…/src%20dir
    raw["decontaminate"] = {"benchmarks": [{"name": "b", "path": f"file://localhost{tmp_path}/b.jsonl"}]}
    spec = parse_spec(raw, tmp_path)
    assert spec.sources[0].path == tmp_path / "src dir"
    assert spec.decontaminate.benchmarks[0].path == tmp_path / "b.jsonl"
    raw["sources"][0]["path"] = "file://fileserver/share/src"
    assert _refused(raw, tmp_path).startswith("sources[0].path: 'file://fileserver/share/src': a file:// URL names")


def _load_text(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    return str(err.value)


def test_a_key_given_twice_is_an_error_naming_key_and_lines(tmp_path):
    """PyYAML keeps the last of two equal keys, silently: the first weight was lost."""
    raw = small_spec_dict()
    raw["mix"]["train"]["weights"] = {"stdlib_json_email": 0.7, "stdlib_async": 0.3}
    text = write_spec(tmp_path / "ok.yaml", raw).read_text(encoding="utf-8")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "stdlib_async: 0.3" in t)
    twice = text.replace("stdlib_async: 0.3", "stdlib_async: 0.3\n      stdlib_async: 3")
    assert "      stdlib_async: 3" in twice  # the writer's indentation
    message = _load_text(tmp_path, twice)
    assert message.endswith(f"invalid YAML: line {line + 1}: duplicate key 'stdlib_async' (first at line {line})")
    merged = "base: &b {seed: 1}\nmix:\n  train:\n    <<: *b\n    seed: 2\n"  # a merge key may be overridden
    assert "duplicate" not in _load_text(tmp_path, merged)


def test_deep_nesting_is_an_error_not_a_recursion_error(tmp_path):
    for text in ("sources: " + "[" * 5000 + "]" * 5000, "a:\n" + "".join("  " * i + "- \n" for i in range(1, 5000))):
        message = _load_text(tmp_path, text)
        assert f"invalid YAML: line {1 if text.startswith('s') else 1 + MAX_YAML_DEPTH}" in message
        assert message.endswith(f"nested deeper than {MAX_YAML_DEPTH} levels")


def _no_hang(seconds: int) -> None:
    def fail(*_: object) -> None:
        raise TimeoutError(f"still loading the spec after {seconds} s")

    signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)


def test_a_sha256_file_that_is_not_a_regular_file_is_never_opened(tmp_path):
    """A FIFO blocked the spec's loading forever and `/dev/zero` read until memory ran out."""
    raw = small_spec_dict()
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/zero"), tmp_path):
        raw["remove"] = {"stdlib_async": {"sha256_file": str(path)}}
        _no_hang(10)
        try:
            message = _refused(raw, tmp_path)
        finally:
            signal.alarm(0)
        assert message == f"remove.stdlib_async: sha256_file {path}: not a regular file (a FIFO, device or directory)"


def test_a_sha256_file_line_is_never_quoted(tmp_path):
    """A `sha256_file` pointing at a secret file (/etc/shadow) printed its first line."""
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$Xq8PzS3cr3tSalt$Hh0oKs9dF:19700:0:99999:7:::\n", encoding="utf-8")
    raw = small_spec_dict(remove={"stdlib_async": {"sha256_file": str(shadow)}})
    message = _refused(raw, tmp_path)
    assert message.startswith(f"remove.stdlib_async: {shadow}:1: not a SHA-256 (64 hex digits")
    assert "S3cr3t" not in message and "19700" not in message


def test_the_largest_sizes_allowed_fit_the_token_dtypes(tmp_path):
    """The limits are what the storage allows: a packing batch of MAX_SEQ_LEN sequences fits
    Parquet's int32 list offsets, every id of the largest vocabulary (plus the FIM and chat
    tokens appended after it) fits Megatron's int32; and the limits themselves load."""
    assert np.iinfo(np.int32).max >= PACK_SEQUENCES * MAX_SEQ_LEN
    assert MAX_VOCAB_SIZE + len(FIM_TOKENS) + len(ChatTokens.model_fields) <= np.iinfo(np.int32).max
    raw = small_spec_dict(tokenizer={"vocab_size": MAX_VOCAB_SIZE})
    raw["corpus"].update(seq_len=MAX_SEQ_LEN, long={"min_chars": 8000, "seq_len": MAX_SEQ_LEN})
    corpus = parse_spec(raw, tmp_path).corpus
    assert corpus.long is not None and corpus.seq_len == corpus.long.seq_len == MAX_SEQ_LEN


@pytest.mark.parametrize(
    "placeholder",
    ["{stdlib.__class__}", "{stdlib[0]}", "{0}", "{}", "{stdlib!r}", "{stdlib:>300}", "{HOME}"],
)
@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("sources[0].path", lambda raw, p: raw["sources"][0].update(path=p)),
        (
            "decontaminate.benchmarks[0].path",
            lambda raw, p: raw.update(decontaminate={"benchmarks": [{"name": "b", "path": p}]}),
        ),
        ("tokenizer.openai_ranks.gpt4", lambda raw, p: raw["tokenizer"].update(openai_ranks={"gpt4": p})),
        ("tokenizer.baselines[1]", lambda raw, p: raw["tokenizer"].update(baselines=["a.json", p])),
    ],
)
def test_only_the_documented_placeholders_expand_in_a_path(tmp_path, placeholder, key, where):
    """`str.format` expanded `{stdlib.__class__}` to `<class 'str'>`; now anything but `{stdlib}`
    and `{site_packages}` is an error naming the key."""
    raw = small_spec_dict()
    where(raw, f"{placeholder}/x")
    message = _refused(raw, tmp_path)
    assert message.startswith(f"{key}: unknown placeholder {placeholder}; a path may use {{stdlib}}, {{site_packages}}")


def test_placeholders_expand_and_braces_are_written_twice(tmp_path):
    raw = small_spec_dict()
    raw["sources"][0]["path"] = "{stdlib}/json"
    raw["sources"][1]["path"] = "{{weird}}/x"
    spec = parse_spec(raw, tmp_path)
    assert spec.sources[0].path == Path(path_variables()["stdlib"]) / "json"
    assert spec.sources[1].path == tmp_path.resolve() / "{weird}" / "x"
    raw["sources"][1]["path"] = "{stdlib"
    assert _refused(raw, tmp_path).startswith("sources[1].path: expected '}' before end of string")
