"""Issues 37 and 61 (security): secrets and PII never outlive hygiene, in any output or record.

Every token below is real-shaped (its format's prefix and length, a random body drawn
here), planted in real standard-library code or in real conversations; "gone" means that
no 8-character piece of its random part is left anywhere.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from detect_secrets.plugins.github_token import GitHubTokenDetector

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.spec import REPO_ROOT, HoldoutSpec, HygieneSpec, NearDedupSpec, SourceKind, SourceSpec
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.hygiene.checks import check_no_secrets, find_leaks
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.chat import clean_conversation, conversation_json
from albor_pipeline.text.documents import DOC_SCHEMA, read_document_set, text_sha256
from albor_pipeline.text.secrets import SecretScanner, candidate_lines, redact_path, redacted
from albor_pipeline_tests.support import STDLIB, STDLIB_PACKAGES

RNG = random.Random(37)
RNG61 = random.Random(61)  # issue 61's tokens, drawn apart: the draws of issue 37's tests stay as they were
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
EMAIL_IN_NAME = "jane.doe@corp-mail.net"


def _random(n: int, chars: str = ALNUM, rng: random.Random = RNG) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _jwt() -> tuple[str, str]:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    payload = part({"sub": _random(12), "name": "Jane", "iat": 1516239022})
    signature = _random(43, B64URL)
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{payload}.{signature}", payload + "." + signature


PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _pem(key: PrivateKey, fmt: serialization.PrivateFormat) -> str:
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


def _private_keys() -> list[tuple[str, str]]:
    """Real private keys, freshly generated, in the PEM formats people paste into code."""
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys = [
        _pem(rsa_key, serialization.PrivateFormat.TraditionalOpenSSL),  # BEGIN RSA PRIVATE KEY
        _pem(ec.generate_private_key(ec.SECP256R1()), serialization.PrivateFormat.TraditionalOpenSSL),
        _pem(ed25519.Ed25519PrivateKey.generate(), serialization.PrivateFormat.OpenSSH),
        _pem(rsa_key, serialization.PrivateFormat.PKCS8),  # BEGIN PRIVATE KEY
    ]
    return [(f'KEY = """{pem}"""\n', "".join(pem.splitlines()[1:-1])) for pem in keys]


def _tokens() -> list[tuple[str, str, str]]:
    """(planted line, the token's random part, the finding type) for every detector type."""
    out = []
    for prefix in ("ghp", "gho", "ghu", "ghs", "ghr"):
        body = _random(36)
        out.append((f'GITHUB_TOKEN = "{prefix}_{body}"\n', body, "GitHub Token"))
    body = f"{_random(22)}_{_random(59)}"
    out.append((f'headers = {{"Authorization": "Bearer github_pat_{body}"}}\n', body, "GitHub Token"))
    body = _random(20, ALNUM + "-_")
    out.append((f'gitlab = "glpat-{body}"\n', body, "GitLab Token"))
    body = _random(24, string.ascii_lowercase + string.digits)
    workspace, bot = _random(12, string.digits), _random(13, string.digits)
    out.append((f'SLACK_BOT_TOKEN = "xoxb-{workspace}-{bot}-{body}"\n', body, "Slack Token"))
    body = _random(99)  # today's live keys: 99 characters after the prefix
    out.append((f'stripe.api_key = "sk_live_{body}"\n', body, "Stripe Access Key"))
    body = _random(36)
    out.append((f'NPMRC = "//registry.npmjs.org/:_authToken=npm_{body}"\n', body, "NPM tokens"))
    body = _random(36)
    out.append((f'NPM_TOKEN = "npm_{body}"\n', body, "NPM tokens"))
    body = _random(150, ALNUM + "-_")
    out.append((f'password = "pypi-AgEIcHlwaS5vcmc{body}"\n', body, "PyPI Token"))
    head, tail = _random(20), _random(20)
    out.append((f'OPENAI_API_KEY = "sk-{head}T3BlbkFJ{tail}"\n', head + "T3BlbkFJ" + tail, "OpenAI Token"))
    head, tail = _random(74, ALNUM + "-_"), _random(74, ALNUM + "-_")
    out.append((f'client = OpenAI(api_key="sk-proj-{head}T3BlbkFJ{tail}")\n', head + tail, "OpenAI Token"))
    token, body = _jwt()
    out.append((f'session = "{token}"\n', body, "JSON Web Token"))
    body = _random(16, string.ascii_uppercase + string.digits)
    out.append((f'AWS_ACCESS_KEY_ID = "AKIA{body}"\n', body, "AWS Access Key"))
    body = _random(40, B64)
    out.append((f'aws_secret_access_key = "{body}"\n', body, "AWS Access Key"))
    out += [(line, body, "Private Key") for line, body in _private_keys()]
    return out


TOKENS = _tokens()


def _pieces(secret: str, size: int = 8) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def _left(secret: str, text: str) -> list[str]:
    """The 8-character pieces of `secret` still in `text`."""
    return [piece for piece in _pieces(secret) if piece in text]


def _real_code(planted: str, path: Path = STDLIB / "json" / "decoder.py") -> tuple[str, str]:
    """Real stdlib code with `planted` after its first paragraph; and the untouched tail."""
    real = path.read_text(encoding="utf-8")
    head, sep, tail = real.partition("\n\n")
    return head + sep + planted + tail, tail


@pytest.mark.parametrize(("line", "secret", "kind"), TOKENS, ids=[f"{k}-{i}" for i, (_, _, k) in enumerate(TOKENS)])
def test_redaction_removes_the_whole_token(line, secret, kind):
    """Finding 1: every detector's finding is redacted whole, not the prefix it reports."""
    text, tail = _real_code(line)
    found = SecretScanner().scan(text)
    redacted = found.redact(text)
    assert found.counts[kind] >= 1, found.counts
    assert not _left(secret, redacted), f"{kind}: pieces of the token survive"
    assert "<KEY>" in redacted and redacted.endswith(tail)  # the real code around it is untouched
    assert SecretScanner().scan(redacted).counts == {}


def _todays_redaction(text: str) -> str:
    """What the redactor did before issue 37 with a GitHub token: it replaced the value
    detect-secrets reports, which is the pattern's group, i.e. the prefix."""
    for line in text.splitlines():
        for found in GitHubTokenDetector().analyze_line(filename="x.py", line=line):
            text = text.replace(found.secret_value or "", "<KEY>")
    return text


def _shard(path: Path, texts: list[str], files: list[str] | None = None) -> Path:
    files = files or [f"f{i}.py" for i in range(len(texts))]
    table = pa.table(
        {"text": texts, "source": ["s"] * len(texts), "file": files, "sha256": [text_sha256(t) for t in texts]},
        schema=DOC_SCHEMA,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _code_dir(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_the_no_secrets_check_is_independent_of_the_redactor(tmp_path, local2):
    """Finding 1's check: an independent scan fails on what the old redactor left (`<KEY>_…`),
    on a token no detect-secrets pattern knows, and on a whole AWS key; it passes on real
    code after hygiene, and never shows a secret."""
    ghp = next(line for line, _, kind in TOKENS if line.startswith("GITHUB_TOKEN"))
    pat = next(line for line, _, kind in TOKENS if "github_pat_" in line)
    aws = next(line for line, _, kind in TOKENS if "AKIA" in line)
    old = _todays_redaction(_real_code(ghp)[0])
    assert "<KEY>_" in old and SecretScanner().scan(old).counts == {}  # the old, same-detector re-scan passed
    # The redactor's entropy detector reads quoted strings only; a YAML-style value of a token
    # name is its blind spot (an unquoted password it redacts: `test_short_passwords_...`).
    unquoted = f"api_token: {_random(32)}\n"
    assert SecretScanner().scan(_real_code(unquoted)[0]).counts == {}
    expected = ["token cut by <KEY>", "GitHub token", "AWS access key id", "high-entropy value of a secret name"]
    for text, kind in zip((old, _real_code(pat)[0], _real_code(aws)[0], _real_code(unquoted)[0]), expected):
        outcome = check_no_secrets([_shard(tmp_path / "bad" / "part-00000-0000.parquet", [text])])
        assert not outcome.passed and outcome.metadata["left"].get(kind) == 1, outcome.description
        assert outcome.metadata["files"] == ["f0.py"]
        shown = json.dumps(outcome.metadata) + outcome.description
        assert not any(_left(secret, shown) for _, secret, _ in TOKENS)
    # Real code (seven standard-library packages, a shard per task on two processes) passes.
    src = SourceSpec(name="s", kind="code", path=STDLIB, include=tuple(f"{p}/**/*.py" for p in STDLIB_PACKAGES))
    ingest_source(src, tmp_path / "in", StageIO(tmp_path), shard_mb=1)
    result = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "out", StageIO(tmp_path))
    outcome = check_no_secrets(shard_files(tmp_path / "out"), local2)
    assert outcome.passed and outcome.metadata["documents"] == result.summary.kept >= 100, outcome.description


def _conversations(secrets: list[str]) -> list[dict]:
    """Real-looking conversations with a secret in each kind of message and part."""
    ghp, glpat, akia = secrets
    return [
        {
            "messages": [
                {"role": "system", "content": f"You deploy with GITHUB_TOKEN={ghp}."},
                {"role": "user", "content": f'My GitLab token is "{glpat}", mail me at {EMAIL_IN_NAME}.'},
                {"role": "assistant", "content": "Never paste a token into a chat; revoke it now."},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "Which key am I using?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "python", "text": f'os.environ["AWS_ACCESS_KEY_ID"] = "{akia}"'},
                        {"type": "python_output", "text": f"{akia}\n"},
                        {"type": "text", "text": f"You use {akia}; rotate it."},
                    ],
                },
            ]
        },
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    ]


def _planted_secrets() -> tuple[list[str], list[str]]:
    """A GitHub, GitLab and AWS token (whole) and their random parts."""
    bodies = [_random(36), _random(20), _random(16, string.ascii_uppercase + string.digits)]
    return [f"ghp_{bodies[0]}", f"glpat-{bodies[1]}", f"AKIA{bodies[2]}"], bodies


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_chat_sources_are_redacted_message_by_message(tmp_path):
    """Finding 2: a chat source goes through the same redaction, every message and part,
    counted like a document source's findings; the conversations stay valid."""
    secrets, bodies = _planted_secrets()
    path = _write_jsonl(tmp_path / "chat" / "chat.jsonl", _conversations(secrets))
    src = SourceSpec(name="c", kind="chat", path=path.parent)
    ingested = ingest_source(src, tmp_path / "in", StageIO(tmp_path))  # secrets: before anything is written
    assert ingested.summary.secrets == {"GitHub Token": 1, "GitLab Token": 1, "AWS Access Key": 3}
    for row in pq.read_table(tmp_path / "in").to_pylist():
        assert not [b for b in bodies if _left(b, row["text"])]
    result = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "out", StageIO(tmp_path), kind=SourceKind.chat)
    rows = read_document_set(tmp_path / "out").to_pylist()
    facts = result.summary
    assert facts.documents_in == facts.kept == len(rows) == 3 and facts.redacted_documents == 1
    assert result.summary.findings == {"E-mail": 1}  # PII: hygiene's part
    for row in rows:
        assert not [b for b in bodies if _left(b, row["text"])] and EMAIL_IN_NAME not in row["text"]
        assert row["sha256"] == text_sha256(row["text"])
    first, second, third = (json.loads(row["text"]) for row in rows)
    assert first[0]["content"].startswith("You deploy with GITHUB_TOKEN=<KEY>.")
    assert second[1]["content"][1] == {"type": "python", "text": 'os.environ["AWS_ACCESS_KEY_ID"] = "<KEY>"'}
    assert third == _conversations(secrets)[2]["messages"]  # nothing to redact: the row as ingested
    dropping = src.model_copy(update={"hygiene": HygieneSpec(redact="drop")})
    dropped = ingest_source(dropping, tmp_path / "drop", StageIO(tmp_path))
    assert dropped.summary.documents == 1 and dropped.summary.skipped == {"secrets": 2}


def test_file_paths_in_metadata_are_redacted(tmp_path):
    """Finding 3: an e-mail or a token in a file name never reaches the examples hygiene and
    documents record (metadata, manifests, provenance, the event log), nor the file column
    of redacted output; `report` keeps the data but still redacts the examples."""
    token = next(line for line, _, _ in TOKENS if line.startswith("GITHUB_TOKEN")).split('"')[1]
    code = (STDLIB / "json" / "scanner.py").read_text(encoding="utf-8")
    generated = "# Generated by the protocol buffer compiler.  DO NOT EDIT!\n" + code
    root = _code_dir(
        tmp_path / "src",
        {
            f"{EMAIL_IN_NAME}/notes.py": code + f"# ask {EMAIL_IN_NAME}\n",
            f"{EMAIL_IN_NAME}/api_{token}_pb2.py": generated,
        },
    )
    for mode in ("redact", "report"):  # the source's mode: ingestion and hygiene both follow it
        spec = HygieneSpec(redact=mode)
        ingest_source(
            SourceSpec(name="s", kind="code", path=root, hygiene=spec), tmp_path / f"in-{mode}", StageIO(tmp_path)
        )
        result = clean_source(tmp_path / f"in-{mode}", spec, tmp_path / mode, StageIO(tmp_path))
        shown = json.dumps(result.summary.examples)
        assert EMAIL_IN_NAME not in shown and not _left(token[4:], shown), shown
        # The token widens over "api_" and "_pb2" (a token runs over letters, digits, "_" and "-").
        assert result.summary.examples["autogenerated"] == ["<EMAIL>/<KEY>.py"]
        assert result.summary.examples.get("redacted") == (["<EMAIL>/notes.py"] if mode == "redact" else None)
        files = pq.read_table(tmp_path / mode).column("file").to_pylist()
        assert files == (["<EMAIL>/notes.py"] if mode == "redact" else [f"{EMAIL_IN_NAME}/notes.py"])
    # documents: near-duplicate examples name files too (here from a source kept as is).
    text = (STDLIB / "json" / "encoder.py").read_text(encoding="utf-8")
    shards = [
        ("a", _shard(tmp_path / "a" / "part-00000-0000.parquet", [text], [f"{EMAIL_IN_NAME}/encoder.py"])),
        ("b", _shard(tmp_path / "b" / "part-00000-0000.parquet", [text + "\n# copy\n"], [f"copies/{token}.py"])),
    ]
    report = build_documents(
        shards, HoldoutSpec(), tmp_path / "documents", StageIO(tmp_path), near=NearDedupSpec()
    ).summary.near_duplicates
    assert report and report.clusters == 1 and report.examples[0][:2] == ("a:<EMAIL>/encoder.py", "b:copies/<KEY>.py")


def test_a_system_only_conversation_is_a_counted_drop(tmp_path):
    """Finding 4: no assistant turn means dropped and counted, as documented, also when the
    conversation is only a system prompt."""
    cleanup: Counter[str] = Counter()
    assert clean_conversation([{"role": "system", "content": "Be brief."}], False, cleanup) is None
    assert cleanup == {"no_assistant": 1}
    rows = [
        {"messages": [{"role": "system", "content": "You are a helpful assistant."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    ]
    path = _write_jsonl(tmp_path / "chat" / "chat.jsonl", rows)
    result = ingest_source(SourceSpec(name="c", kind="chat", path=path.parent), tmp_path / "in", StageIO(tmp_path))
    assert result.summary.documents == 1 and result.summary.cleanup == {"no_assistant": 1}


Decode = Callable[[np.ndarray], str]


def _strings(path: Path, decode: Decode) -> Iterator[str]:
    """Every string a Parquet file holds: string columns, and id lists decoded as text."""
    table = pq.read_table(path)
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            yield from (s for s in column.to_pylist() if s)
        elif pa.types.is_list(column.type) and pa.types.is_integer(column.type.value_type):
            ids = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
            if len(ids):
                yield decode(ids)


def _texts_under(root: Path, decode: Decode, vocab_size: int) -> Iterator[tuple[Path, str]]:
    """Every file under `root` as text: its bytes, Parquet's strings, token files decoded."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        yield path, path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":
            yield from ((path, s) for s in _strings(path, decode))
        elif path.suffix == ".bin" and not path.name.endswith("_mask.bin"):
            dtype = np.uint16 if vocab_size <= 1 << 16 else np.uint32
            yield path, decode(np.fromfile(path, dtype=dtype))


def _build_and_read(tmp_path: Path, extra: list[dict]) -> tuple[Any, Iterator[tuple[str, str, bool]]]:
    """The small spec with `extra` sources built into tmp_path/data with an instance in
    tmp_path/home, every check passing; and (path under tmp_path, text, whether ingested/ holds
    it: the task store's entries are links to its files) for every file of both, as text: its
    bytes, Parquet's strings, token ids decoded with the run's tokenizer."""
    import dagster as dg
    from tokenizers import Tokenizer

    from albor_pipeline.spec import load_spec
    from albor_pipeline_tests.support import instance_home, materialize_all, small_spec_dict, write_spec

    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict(extra)))
    home, data = instance_home(tmp_path / "home"), tmp_path / "data"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = materialize_all(spec, data, instance)
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    tok = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))

    def decode(ids: np.ndarray) -> str:
        return tok.decode(ids.astype(np.int64).tolist(), skip_special_tokens=False)

    def texts() -> Iterator[tuple[str, str, bool]]:
        ingested = {p.stat().st_ino for p in (data / "ingested").rglob("*") if p.is_file()}
        for root in (data, home):
            for path, text in _texts_under(root, decode, tok.get_vocab_size(with_added_tokens=True)):
                rel = path.relative_to(tmp_path).as_posix()
                yield rel, text, rel.startswith("data/ingested/") or path.stat().st_ino in ingested

    return result, texts()


@pytest.mark.graph
def test_planted_tokens_are_gone_from_every_output_and_the_instance(tmp_path):
    """Issue 37, done when: a GitHub, GitLab and AWS token planted in a code source and in a
    chat source are absent, whole and in part, from every file of a default-shaped build
    (Parquet strings, token ids decoded with the run's tokenizer, .bin token files, JSON,
    Markdown) and from every file of the Dagster instance; an e-mail in a file name is
    absent too, but from the fingerprint cache (the file name is its key) and from the text
    ingested/ keeps for hygiene (an e-mail in a text is PII, not a secret)."""
    secrets, bodies = _planted_secrets()
    ghp, glpat, akia = secrets
    planted = f'GITHUB_TOKEN = "{ghp}"\nGITLAB = {{"token": "{glpat}"}}\nAWS_ACCESS_KEY_ID = "{akia}"\n'
    # Real code the small spec's own sources do not hold (near dedup would remove copies).
    real = [p for d in ("http", "wsgiref") for p in sorted((STDLIB / d).glob("*.py")) if p.stat().st_size > 2000]
    files = {f"planted_{p.parent.name}_{p.stem}.py": _real_code(planted, p)[0] for p in real}
    notes = (STDLIB / "html" / "parser.py").read_text(encoding="utf-8") + f"# maintainer: {EMAIL_IN_NAME}\n"
    files[f"{EMAIL_IN_NAME}/parser.py"] = notes  # an e-mail in its name and its text: a "redacted" example
    code = _code_dir(tmp_path / "planted", files)
    (tmp_path / "outside.py").write_text("x = 1\n" * 20, encoding="utf-8")
    (code / EMAIL_IN_NAME / "outside.py").symlink_to(tmp_path / "outside.py")  # skipped: ingest names it
    samples = (REPO_ROOT / "data" / "samples" / "python_chat.jsonl").read_text(encoding="utf-8").splitlines()
    chat = _write_jsonl(tmp_path / "chat" / "chat.jsonl", _conversations(secrets) + [json.loads(x) for x in samples])
    extra = [
        {"name": "planted", "kind": "code", "path": str(code)},
        {"name": "planted_chat", "kind": "chat", "path": str(chat.parent)},
    ]
    result, texts = _build_and_read(tmp_path, extra)
    conversations = result.asset_materializations_for_node("conversations")[0].metadata
    redaction = conversations["redaction"].value
    assert isinstance(redaction, dict) and redaction["planted_chat"]["secrets"]["GitHub Token"] == 1
    reached: set[str] = set()
    for rel, text, ingested in texts:
        assert not [b for b in bodies if _left(b, text)], f"a planted token survives in {rel}"
        # PII in a text is hygiene's to redact: ingested/ keeps the e-mail in parser.py's text
        # (and so does the task store, whose entry of that ingest task is a link to the same file).
        assert EMAIL_IN_NAME not in text or ingested or rel.startswith("data/cache/fingerprints/"), rel
        if "GITHUB_TOKEN = " in text or "Never paste a token" in text:
            reached.add(rel.split("/")[1])
        if rel.startswith("home/") and "<EMAIL>/parser.py" in text:
            reached.add("examples in the event log")
        if rel.startswith("home/") and "<EMAIL>/outside.py" in text:
            reached.add("skips in the event log")
    files = pq.read_table(tmp_path / "data" / "ingested" / "planted", columns=["file"]).column("file").to_pylist()
    assert "<EMAIL>/parser.py" in files and not [f for f in files if EMAIL_IN_NAME in f]
    # The planted code and conversations did reach the corpus and the SFT data, redacted, and
    # the file named with an e-mail reached the event log, redacted.
    stages = {"ingested", "filtered", "documents", "mixed", "fim", "corpus", "conversations", "sft"}
    assert {*stages, "examples in the event log", "skips in the event log"} <= reached, reached


def test_hygiene_scans_for_secrets_when_ingestion_kept_them(tmp_path):
    """Ingestion redacts secrets under the source's spec mode; hygiene may run with another (a
    launchpad override). With the spec at `report`, ingestion keeps them, so hygiene, run as
    `redact`, must find and redact them itself: it decides by ingestion's recorded mode."""
    import dagster as dg

    from albor_pipeline.definitions import build_definitions
    from albor_pipeline.defs.automation import BUILD_JOB
    from albor_pipeline.spec import load_spec
    from albor_pipeline_tests.support import small_spec_dict, write_spec

    secrets, bodies = _planted_secrets()
    planted = "".join(f'TOKEN_{i} = "{s}"\n' for i, s in enumerate(secrets))
    code = _code_dir(tmp_path / "planted", {"planted.py": _real_code(planted)[0]})
    extra = [{"name": "planted", "kind": "code", "path": str(code), "hygiene": {"redact": "report"}}]
    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict(extra)))
    data = tmp_path / "data"
    job = build_definitions(spec, data).resolve_job_def(BUILD_JOB)
    keys = [dg.AssetKey(["ingested", "planted"]), dg.AssetKey(["filtered", "planted"])]
    run_config = {"ops": {"filtered__planted": {"config": {"redact": "redact"}}}}
    assert job.execute_in_process(asset_selection=keys, run_config=run_config).success
    ingested = pq.read_table(data / "ingested" / "planted").column("text").to_pylist()
    assert all(any(_left(b, t) for t in ingested) for b in bodies)  # `report`: kept at ingest
    filtered = read_document_set(data / "filtered" / "planted").column("text").to_pylist()
    assert filtered and not [b for b in bodies for t in filtered if _left(b, t)]


def _both_ways(text: str) -> tuple[str, Counter[str]]:
    """`redacted` as ingestion and hygiene call it (the batch's RE2 pre-filter, `candidate_lines`)
    and as a path or a message is (Python's `re` pre-filter): the same either way."""
    batch = redacted(text, lines=candidate_lines(pa.array([text], pa.large_string()))[0])
    assert batch == redacted(text), text
    return batch


def _ml_credentials() -> list[tuple[str, str, str, str]]:
    """(planted text, the token's random part, the redactor's kind, the check's kind) for the
    credentials of issue 61 item 10, where they are written: shell, CLI, prose, comments."""
    hf, ant, goog = (
        _random(34, string.ascii_letters, rng=RNG61),
        _random(93, B64URL, rng=RNG61) + "AA",
        _random(35, B64URL, rng=RNG61),
    )
    twilio, wandb = _random(32, string.hexdigits[:16], rng=RNG61), _random(40, string.hexdigits[:16], rng=RNG61)
    discord = f"M{_random(23, B64URL, rng=RNG61)}.{_random(6, B64URL, rng=RNG61)}.{_random(27, B64URL, rng=RNG61)}"
    aws = [_random(40, B64, rng=RNG61) for _ in range(2)]
    return [
        (
            "export HF_TOKEN=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\n",
            "QgGnRfXBkgQysDFISXzmPBqsfHuumXrxWU",
            "Hugging Face Token",
            "Hugging Face token",
        ),
        (f"huggingface-cli login --token hf_{hf}\n", hf, "Hugging Face Token", "Hugging Face token"),
        (f"# My token is hf_{hf}, please don't share it.\n", hf, "Hugging Face Token", "Hugging Face token"),
        (f"# The Claude key for CI: sk-ant-api03-{ant}\n", ant, "Anthropic Key", "Anthropic key"),
        (f"# Maps is called with AIza{goog} (restricted to our domain).\n", goog, "Google API Key", "Google API key"),
        (
            "# twilio sid SK4af1acc4a3e5c3b8dfd6d98f788cde61 here\n",
            "4af1acc4a3e5c3b8dfd6d98f788cde61",
            "Twilio API Key",
            "Twilio API key",
        ),
        (f"# the SMS sender authenticates as SK{twilio}\n", twilio, "Twilio API Key", "Twilio API key"),
        (f"# discord bot token: {discord}\n", discord[1:], "Discord Bot Token", "Discord bot token"),
        (f"# aws secret: {aws[0]}\n", aws[0], "AWS Access Key", "AWS secret key"),
        (f"# {aws[1]} is the AWS secret access key of the test account\n", aws[1], "AWS Access Key", "AWS secret key"),
        (
            "WANDB_API_KEY=6f1e9a0c4b2d7e8f3a5c6b9d0e1f2a3b4c5d6e7f\n",
            "6f1e9a0c4b2d7e8f3a5c6b9d0e1f2a3b4c5d6e7f",
            "W&B Key",
            "W&B key",
        ),
        (f"# then run: wandb login {wandb}\n", wandb, "W&B Key", "W&B key"),
    ]


ML_CREDENTIALS = _ml_credentials()


@pytest.mark.parametrize(("line", "secret", "kind", "leak"), ML_CREDENTIALS, ids=[c[3] for c in ML_CREDENTIALS])
def test_ml_credentials_are_redacted_and_left_ones_fail_the_check(line, secret, kind, leak):
    """Issue 61 item 10: the credentials an ML team pastes (shell, CLI, prose, comments) are
    redacted whole, and the independent check finds each in the unredacted text (and nothing
    in the redacted one)."""
    assert find_leaks(line)[leak] == 1, line  # the check, on its own patterns
    text, tail = _real_code(line)
    cleaned, found = _both_ways(text)
    assert found == {kind: 1} and not _left(secret, cleaned) and cleaned.endswith(tail), found
    assert find_leaks(cleaned) == {}


def test_ml_credentials_in_a_chat_are_redacted():
    """Issue 61 item 10: a token a user pastes into a conversation is redacted there too."""
    hf, secret, _, _ = ML_CREDENTIALS[1]
    messages = [
        {"role": "user", "content": f"Why does `{hf.strip()}` fail? My token is hf_{secret}."},
        {"role": "assistant", "content": "Revoke that token now: it is public."},
    ]
    cleaned, found = redacted(conversation_json(messages), conversation=True)
    assert found == {"Hugging Face Token": 2} and not _left(secret, cleaned)
    assert (
        json.loads(cleaned)[0]["content"] == "Why does `huggingface-cli login --token <KEY>` fail? My token is <KEY>."
    )


LOOKS_SECRET_BUT_IS_NOT = [
    "# secret sauce: 6f1e9a0c4b2d7e8f3a5c6b9d0e1f2a3b4c5d6e7f (the commit that fixed it)\n",  # a git SHA
    "SecretsManagerRotationLambdaFunctionV2X1 = secret_rotation()\n",  # an identifier
    "# See: http://docs.aws.amazon.com/AmazonS3/latest/dev/UploadingObjects.html on secrets\n",  # a URL's path
    "wandb @ git+https://github.com/wandb/wandb@6f1e9a0c4b2d7e8f3a5c6b9d0e1f2a3b4c5d6e7f\n",  # a pinned commit
    "hf_hub_download(repo_id=repo, filename=name, token=token)\n",
]


@pytest.mark.parametrize("line", LOOKS_SECRET_BUT_IS_NOT)
def test_shas_identifiers_and_urls_near_a_secret_word_are_kept(line):
    """Issue 61 item 10's false positives: a 40-character run near "secret" or "wandb" is a key
    only when it looks random (both cases, a digit, 4.3 bits per character) and stands alone."""
    assert _both_ways(line) == (line, Counter()) and find_leaks(line) == {}


PUBLIC_IPS = [
    ("proxy = 45.33.101.17:8080\n", "proxy = <IP_ADDRESS>:8080\n"),
    ('url = "http://45.33.101.20:9000/metrics"\n', 'url = "http://<IP_ADDRESS>:9000/metrics"\n'),
    ("# The old server is 45.33.101.19.\n", "# The old server is <IP_ADDRESS>.\n"),
    ("# Resolve with 2606:4700:4700::1111.\n", "# Resolve with <IP_ADDRESS>.\n"),
    ("# Ask 45.33.101.19: it knows.\n", "# Ask 45.33.101.19: it knows.\n"),  # a heading's "3.8.2.4:" as well
]
NOT_ADDRESSES = [
    "# RFC 5445 3.8.2.4: The VALUE parameter is optional\n",
    "# see section 7.4.7.1. of the handbook\n",
    "oid = (1, 3, 6, 1)  # 1.3.6.1.4.1 enterprises\n",
    'wheel = "libfoo-1.2.3.4.tar.gz"\n',
    "assertBadOctet('1.2.3.4::', '4::')\n",
]


@pytest.mark.parametrize(("line", "expected"), PUBLIC_IPS)
def test_public_ips_before_a_port_or_a_sentence_end_are_redacted(line, expected):
    """Issue 61 item 12: an address followed by its port, in a URL, or ending a sentence is an
    address (a ":" before a port and a "." before a space end it), in a text and in a path."""
    text = _real_code(line)[0]
    cleaned, found = redacted(text, lines=candidate_lines(pa.array([text], pa.large_string()))[0])
    assert cleaned == _real_code(expected)[0] and found == ({"IP address": 1} if "<" in expected else {})


def test_addresses_in_file_paths_are_redacted():
    """Issue 61 item 12: every file path a stage records goes through `redact_path`."""
    assert redact_path("hosts/45.33.101.20:9000/app.py") == "hosts/<IP_ADDRESS>:9000/app.py"
    assert redact_path("logs/at 45.33.101.19./run.py") == "logs/at <IP_ADDRESS>./run.py"
    assert redact_path("libfoo-1.2.3.4.tar.gz/setup.py") == "libfoo-1.2.3.4.tar.gz/setup.py"


@pytest.mark.parametrize("line", NOT_ADDRESSES)
def test_section_numbers_oids_and_versions_are_not_addresses(line):
    assert redacted(line) == (line, Counter())


def _passwords_and_signatures() -> list[tuple[str, str, str, str]]:
    """(planted text, the secret, the redactor's kind, the check's kind): issue 61 item 14."""
    sig = _random(43, B64, rng=RNG61).replace("+", "%2B").replace("/", "%2F") + "%3D"
    sas = f"https://acct.blob.core.windows.net/data/x.csv?sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01&sig={sig}"
    pw, yaml_pw, env_pw = (
        _random(11, B64, rng=RNG61) + "4",
        "hunter2xyz" + _random(4, string.digits, rng=RNG61),
        _random(10, rng=RNG61) + "7",
    )
    return [
        ('DB_PASSWORD = "Tr0ub4dor&3xK9!qLm2"\n', "Tr0ub4dor&3xK9!qLm2", "Password", "password"),
        (f'conn = connect(user="app", password="{pw}")\n', pw, "Password", "password"),
        (f'CONFIG = """\ndatabase:\n  password: {yaml_pw}  # prod\n"""\n', yaml_pw, "Password", "password"),
        (f'ENV = """\nexport PGPASSWORD={env_pw}\n"""\n', env_pw, "Password", "password"),
        (f'URL = "{sas}"\n', sig, "Azure SAS Signature", "Azure SAS signature"),
    ]


PASSWORDS = _passwords_and_signatures()


@pytest.mark.parametrize(
    ("line", "secret", "kind", "leak"), PASSWORDS, ids=[f"{c[3]}-{i}" for i, c in enumerate(PASSWORDS)]
)
def test_short_passwords_and_sas_signatures_are_redacted_and_checked(line, secret, kind, leak):
    """Issue 61 item 14: a password assigned to a password name is a secret at any length
    (quoted, or unquoted in YAML or an .env line), as is an Azure SAS URL's signature; the
    check finds each in the unredacted text."""
    assert dict(find_leaks(line)) == {leak: 1}, line
    text, tail = _real_code(line)
    cleaned, found = _both_ways(text)
    assert found == {kind: 1} and not _left(secret, cleaned) and cleaned.endswith(tail), found
    assert "<KEY>" in cleaned and find_leaks(cleaned) == {}


ORDINARY_CODE = [
    "password = get_password()\n",
    "    password: str\n",
    "def connect(user, password=None):\n",
    'password = os.environ["X"]\n',
    "        self.password = password\n",
    "    password = old_pw2xyz\n",  # indented code's name, not an .env line
    'bypass = "abc12345x"\n',
    'pwd = "/usr/lib64/app"\n',
    'password = "%(password)s1"\n',
    'password_field = "password_confirmation2"\n',
]


@pytest.mark.parametrize("line", ORDINARY_CODE)
def test_ordinary_code_about_passwords_is_kept(line):
    """Issue 61 item 14's false positives: calls, annotations, defaults, names, paths and
    templates assigned to a password name are code, not passwords."""
    assert _both_ways(line) == (line, Counter()) and find_leaks(line) == {}


def test_an_unquoted_yaml_password_fails_the_check(tmp_path):
    """docs/quality.md: an unquoted `password:` in YAML left in the text fails `no_secrets_left`."""
    text = _real_code(PASSWORDS[2][0])[0]
    outcome = check_no_secrets([_shard(tmp_path / "part-00000-0000.parquet", [text])])
    assert not outcome.passed and outcome.metadata["left"] == {"password": 1}


@pytest.mark.parametrize(
    "address", ["josé@exämple.de", "用户@例子.广告", "wők@exàmple.com", "jörg.müller@xn--mller-kva.de"]
)
def test_internationalized_emails_are_redacted_whole(address):
    """Issue 61 item 14: e-mails with non-ASCII local or domain parts."""
    text = f"# Maintainer: {address}, ask there.\n"
    cleaned, found = redacted(text, lines=candidate_lines(pa.array([text], pa.large_string()))[0])
    assert cleaned == "# Maintainer: <EMAIL>, ask there.\n" and found == {"E-mail": 1}


ISSUE61_KINDS = ("code", "jsonl", "csv", "parquet", "chat", "mc", "base_eval")
ISSUE61_ADDRESSES = {"45.33.101.17", "45.33.101.20", "45.33.101.19", "2606:4700:4700::1111", "josé@exämple.de"}
MARKER = "Planted for issue 61 in a {} source."


def _planted_prose(kind: str, topic: str, planted: str) -> str:
    """A real Python help topic (prose) with a marker and `planted` after its first paragraph."""
    rows = (REPO_ROOT / "data" / "samples" / "pydoc_topics.jsonl").read_text(encoding="utf-8").splitlines()
    real = next(row["text"] for row in map(json.loads, rows) if row["topic"] == topic)
    head, sep, tail = real.partition("\n\n")
    return f"{head}{sep}{MARKER.format(kind)}\n{planted}\n{tail}"


def _in_every_source_kind(root: Path, lines: list[str]) -> list[dict]:
    """Sources of every kind holding `lines`: real code and prose around them, a conversation
    quoting them, multiple-choice and base-eval items asking about them."""
    planted, said = "".join(lines), " ".join(x.strip() for x in lines)
    code = _code_dir(
        root / "code",
        {"planted.py": _real_code(f"# {MARKER.format('code')}\n{planted}", STDLIB / "http" / "cookies.py")[0]},
    )
    jsonl = _write_jsonl(root / "jsonl" / "t.jsonl", [{"text": _planted_prose("jsonl", "with", planted)}])
    (root / "csv").mkdir()
    (root / "csv" / "t.csv").write_text(
        'text\n"' + _planted_prose("csv", "try", planted).replace('"', '""') + '"\n', encoding="utf-8"
    )
    (root / "parquet").mkdir()
    pq.write_table(pa.table({"text": [_planted_prose("parquet", "while", planted)]}), root / "parquet" / "t.parquet")
    ask = [{"role": "user", "content": f"{MARKER.format('chat')} Is this config safe? {said}"}]
    samples = [json.loads(x) for x in (REPO_ROOT / "data" / "samples" / "python_chat.jsonl").open(encoding="utf-8")]
    chat = _write_jsonl(
        root / "chat" / "c.jsonl", [{"messages": [*ask, {"role": "assistant", "content": said}]}, *samples]
    )
    other = {"question": "Which built-in returns the length of a container?", "choices": ["len", "abs"], "answer": 0}
    mc = _write_jsonl(
        root / "mc" / "mc.jsonl",
        [{"question": f"{MARKER.format('mc')} Which line leaks? {said}", "choices": lines[:3], "answer": 0}, other],
    )
    base = _write_jsonl(
        root / "base" / "mc.jsonl",
        [
            {"query": f"Question: {MARKER.format('base_eval')} {said}\nAnswer:", "choices": lines[3:5], "gold": 1},
            {"query": "Question: Which built-in returns a length?\nAnswer:", "choices": ["len", "abs"], "gold": 0},
        ],
    )
    kinds = dict(
        zip(ISSUE61_KINDS, (code, jsonl.parent, root / "csv", root / "parquet", chat.parent, mc.parent, base.parent))
    )
    sources = [{"name": f"planted_{kind}", "kind": kind, "path": str(path)} for kind, path in kinds.items()]
    sources[-1]["task_type"] = "multiple_choice"
    # The text sources' documents are planted lines, not prose: the prose rules would drop them
    # (this is about secrets), so they keep the rules every document source had before them.
    code_rules = {"starcoder": {}, "gopher_repetition": None, "gopher_quality": None, "fineweb": None}
    for source in sources:
        if source["kind"] in ("jsonl", "csv", "parquet"):
            source["hygiene"] = {"rules": code_rules}
    return sources


@pytest.mark.graph
def test_issue_61_s_secrets_and_addresses_are_gone_from_every_source_kind(tmp_path):
    """Issue 61, done when: a planted token of every type it found (Hugging Face, Anthropic,
    Google, Twilio, Discord, AWS secret keys in comments, W&B, short passwords, Azure SAS
    signatures) and its addresses (IPs with a port, in a URL, ending a sentence, IPv6, an
    IDN e-mail), in a source of every kind, are absent from every output file and from the
    instance after a default-shaped build, token ids decoded too. Each source's marker shows
    that its planted text reached the outputs (redacted), so absence is not a dropped document."""
    secrets = [(line, secret) for line, secret, _, _ in (*ML_CREDENTIALS, *PASSWORDS)]
    lines = [line for line, _ in secrets] + [line for line, _ in PUBLIC_IPS[:4]] + ["# Maintainer: josé@exämple.de\n"]
    _, texts = _build_and_read(tmp_path, _in_every_source_kind(tmp_path, lines))
    reached: set[str] = set()
    for rel, text, ingested in texts:
        assert not [line for line, secret in secrets if _left(secret, text)], rel
        # A document's or conversation's PII is hygiene's to redact: ingested/ keeps it (as do the
        # task store's links to those files); an eval item's is redacted at ingest.
        evals = rel.startswith(("data/ingested/planted_mc", "data/ingested/planted_base_eval"))
        assert (ingested and not evals) or not [a for a in ISSUE61_ADDRESSES if a in text], rel
        if rel.startswith(("data/documents/", "data/sft/", "data/eval/")):  # documents: before FIM cuts them
            reached |= {kind for kind in ISSUE61_KINDS if MARKER.format(kind) in text}
    assert reached == set(ISSUE61_KINDS), reached
