"""Hygiene on real files with planted cases: secrets of each kind, e-mails, public and
private IPs, phone numbers, a minified file, a generated protobuf-style file, a data table;
and the machine's own sources kept whole (their version strings, dates and numeric
literals are not phone numbers)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.spec import AuditSpec, HygieneRules, HygieneSpec, ProseParams, SourceSpec, StarCoder
from albor_pipeline.stages.hygiene import hygiene
from albor_pipeline.stages.hygiene.families import CODE
from albor_pipeline.stages.hygiene.hygiene import clean_source, rescan
from albor_pipeline.stages.hygiene.rules import conds, decide
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.documents import VIEW_SCHEMA, read_document_set, read_documents, text_sha256, texts_of
from albor_pipeline.text.ledger import LEDGER, TEXTS
from albor_pipeline.text.secrets import PHONE_RE, SecretScanner, candidate_lines
from albor_pipeline_tests.support import STDLIB, STDLIB_PACKAGES

JWT = (
    ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
        for part in ({"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "Jane", "iat": 1516239022})
    )
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----\n"
)
# One of each kind, as they appear in real code: (planted line, the secret, its type).
SECRETS = [
    ('AWS_ACCESS_KEY_ID = "AKIAQYLPMN5HHHFPZAM2"\n', "AKIAQYLPMN5HHHFPZAM2", "AWS Access Key"),
    (
        'GITHUB_TOKEN = "ghp_Xy7Kq9Lm2Np4Rs6Tu8Vw0Yz1Ab3Cd5Ef7Gh9"\n',
        "ghp_Xy7Kq9Lm2Np4Rs6Tu8Vw0Yz1Ab3Cd5Ef7Gh9",
        "GitHub Token",
    ),
    ('gitlab = "glpat-Zx8Cv7Bn6Mm5Ll4Kk3Jj2H"\n', "glpat-Zx8Cv7Bn6Mm5Ll4Kk3Jj2H", "GitLab Token"),
    (
        'SLACK = "xoxb-293847561029-3847561029384-Qw8Er7Ty6Ui5Op4As3Df2Gh1"\n',
        "xoxb-293847561029-3847561029384-Qw8Er7Ty6Ui5Op4As3Df2Gh1",
        "Slack Token",
    ),
    (f'session = "{JWT}"\n', JWT, "JSON Web Token"),
    ('api_secret = "q8Zr3xT1vN0bL6mP2sK9wE4yU7iO5aHd"\n', "q8Zr3xT1vN0bL6mP2sK9wE4yU7iO5aHd", "High Entropy String"),
]
# Documented limit: a secret split across string concatenation is found only piece by piece,
# where a piece looks like a secret on its own (here the long, high-entropy tail).
SPLIT_SECRET = 'token = "ghp_Xy7Kq9Lm2Np4" + "Rs6Tu8Vw0Yz1Ab3Cd5Ef7Gh9"\n'


def _planted() -> str:
    real = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    head, _, tail = real.partition('"""Implementation of JSONDecoder')
    docstring = (
        '"""Implementation of JSONDecoder.\n\nQuestions: jane.doe@corp-mail.net or ops+json@example-co.org.\n'
        "Mirror at 8.8.4.4 (fallback 2001:4860:4860::8888); lab boxes 10.0.0.7, 127.0.0.1, 192.0.2.10.\n"
        'On call: +44 20 7946 0958.\n"""\n'
    )
    planted = "".join(line for line, _, _ in SECRETS) + PRIVATE_KEY_ASSIGN + SPLIT_SECRET
    return head + docstring + planted + '__version__ = "1.2.3.4"\n' + tail.split("\n", 1)[1]


PRIVATE_KEY_ASSIGN = f'KEY = """{PRIVATE_KEY}"""\n'


def test_secrets_emails_and_public_ips_are_redacted_and_counted():
    text = _planted()
    found = SecretScanner().scan(text)
    redacted = found.redact(text)
    for _, secret, kind in SECRETS:
        assert secret not in redacted, kind
        assert found.counts[kind] >= 1, kind
    assert found.counts["Private Key"] == 1 and "MIIEowIBAAKCAQEAu1SU1LfV" not in redacted
    assert "jane.doe@corp-mail.net" not in redacted and "ops+json@example-co.org" not in redacted
    assert found.counts["E-mail"] == 2 and redacted.count("<EMAIL>") == 2
    assert "8.8.4.4" not in redacted and "2001:4860:4860::8888" not in redacted and found.counts["IP address"] == 2
    for kept in ("10.0.0.7", "127.0.0.1", "192.0.2.10", '__version__ = "1.2.3.4"'):
        assert kept in redacted  # private, loopback, documentation ranges and versions stay
    assert "On call: <PHONE_NUMBER>." in redacted and found.counts["Phone number"] == 1
    # The documented limit: of a secret split across a concatenation, the short head survives.
    assert 'token = "ghp_Xy7Kq9Lm2Np4" + "<KEY>"' in redacted
    # Placeholders are ordinary text, and a second scan finds nothing.
    assert SecretScanner().scan(redacted).counts == {}
    # The real code around the plants is untouched.
    assert redacted.endswith(
        (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8").split('"""', 2)[2].split("\n", 1)[1]
    )


def filter_reason(text: str, starcoder: StarCoder) -> str | None:
    """The StarCoder preset's reason for dropping `text`, from its `code` signals."""
    cols = CODE.score(pa.array([text]), [text], ProseParams()) | {"chars": [len(text)]}
    cs = conds(HygieneRules(starcoder=starcoder))
    k = int(decide(cs, {n: np.asarray(v) for n, v in cols.items()}, 1)[0])
    return None if k < 0 else cs[k].reason


def test_filters_catch_minified_generated_and_data_files_but_keep_real_code():
    spec = StarCoder()
    real = sorted((STDLIB / "json").glob("*.py")) + sorted((STDLIB / "email").glob("*.py"))
    kept = {p.name: filter_reason(p.read_text(encoding="utf-8"), spec) for p in real}
    assert {k: v for k, v in kept.items() if v} == {}, "distinct real files are kept"
    code = (STDLIB / "json" / "encoder.py").read_text(encoding="utf-8")
    minified = ";".join(line.strip() for line in code.splitlines() if line.strip() and not line.strip().startswith("#"))
    generated = "# -*- coding: utf-8 -*-\n# Generated by the protocol buffer compiler.  DO NOT EDIT!\n" + code
    table = (
        "TABLE = [\n" + "".join(f"    0x{i * 2654435761 % 2**32:08x}, {i}, {i * 3.5},\n" for i in range(3000)) + "]\n"
    )
    symbols = "x = " + " + ".join(["(a*b)/{c}-[d]"] * 2) + "\n" + "#" * 60 + "\n" * 3 + "|" * 40 + "\n"
    assert filter_reason(minified, spec) == "long_line"
    assert filter_reason(generated, spec) == "autogenerated"
    assert filter_reason(table, spec) == "data_heavy"
    assert filter_reason(symbols * 20, spec) == "low_alnum"
    assert filter_reason(minified, StarCoder(max_line_length=None, max_mean_line_length=None)) is None  # off


@pytest.mark.parametrize("mode", ["redact", "drop", "report", "off"])
def test_clean_source_accounts_for_every_document(tmp_path, mode):
    src = tmp_path / "src"
    src.mkdir()
    (src / "planted.py").write_text(_planted(), encoding="utf-8")
    generated = "# Generated by the protocol buffer compiler.  DO NOT EDIT!\n# Contact jane.doe@corp-mail.net\nx = 1\n"
    (src / "generated_pb2.py").write_text(generated)
    for path in sorted((STDLIB / "json").glob("*.py")):
        (src / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    # The source's mode: ingestion takes the secrets (redacts or drops them), hygiene the PII.
    spec = HygieneSpec(redact=mode)
    ingested = ingest_source(
        SourceSpec(name="s", kind="code", path=src, hygiene=spec), tmp_path / "in", StageIO(tmp_path)
    )
    audit = AuditSpec(keep_removed=True)
    result = clean_source(tmp_path / "in", spec, tmp_path / "out", StageIO(tmp_path), audit=audit)
    rows = read_document_set(tmp_path / "out").to_pylist()
    facts = result.summary
    assert facts.documents_in == facts.kept + sum(facts.removed.values()) == len(rows) + sum(facts.removed.values())
    assert facts.removed["autogenerated"] == 1 and facts.examples["autogenerated"] == ["generated_pb2.py"]
    texts = {r["file"]: r["text"] for r in rows}
    # json/__init__.py has a real one: __author__ = 'Bob Ippolito <bob@...>'
    if mode in ("redact", "drop"):
        assert ingested.summary.secrets["AWS Access Key"] >= 1 and ingested.summary.secrets["Private Key"] == 1
        assert not {k for k in result.summary.findings if k not in ("E-mail", "IP address", "Phone number")}
    if mode == "redact":
        assert "<KEY>" in texts["planted.py"] and "Bob Ippolito <<EMAIL>>" in texts["__init__.py"]
        assert "<EMAIL>" in texts["planted.py"] and "<IP_ADDRESS>" in texts["planted.py"]
        assert "<PHONE_NUMBER>" in texts["planted.py"] and result.summary.findings["Phone number"] == 1
        assert result.summary.redacted_documents == 2 and rescan(tmp_path / "out" / TEXTS) == {}
    elif mode == "drop":  # planted.py at ingest (its secrets), __init__.py at hygiene (its e-mail)
        assert ingested.summary.skipped["secrets"] == 1 and result.summary.removed["secrets_or_pii"] == 1
        assert not {"planted.py", "__init__.py"} & set(texts)
    elif mode == "report":
        assert texts["planted.py"] == _planted() and result.summary.findings["AWS Access Key"] == 1
        assert rescan(tmp_path / "out" / TEXTS)["E-mail"] == 4 and rescan(tmp_path / "out" / TEXTS)["Phone number"] == 1
    else:
        assert texts["planted.py"] == _planted() and result.summary.findings == {}
    assert json.dumps(result.summary.findings).find("AKIA") < 0  # counts only: no secret in the metadata
    # The output is a view over the shard of texts: every ingested document, at the view's rows.
    (view,) = shard_files(tmp_path / "out")
    stored = pq.read_table(texts_of(view))
    assert stored.num_rows == facts.documents_in and pq.read_schema(view) == VIEW_SCHEMA
    assert all(text_sha256(r["text"]) == r["sha256"] for r in rows)  # each view row joins its own text
    kept = pq.read_table(view).column("row").to_numpy()
    assert [r["text"] for r in rows] == stored.column("text").take(kept).to_pylist()
    backwards = read_documents(view, ["file", "text"], rows=np.arange(len(rows))[::-1].copy()).to_pylist()
    assert backwards == [{"file": r["file"], "text": r["text"]} for r in rows[::-1]]
    if mode in ("redact", "drop"):  # no finding reaches the data dir, not even in a dropped document
        assert rescan(tmp_path / "out" / TEXTS) == {}
    # `audit.keep_removed`: the removed document's text in the ledger, redacted in every mode that scans.
    ledger = pq.read_table(tmp_path / "out" / LEDGER).to_pylist()
    (removed,) = [r["text"] for r in ledger if r["file"] == "generated_pb2.py"]
    assert removed == (None if mode == "off" else generated.replace("jane.doe@corp-mail.net", "<EMAIL>"))


def test_without_a_task_store_each_row_group_is_redacted_once(tmp_path, monkeypatch):
    """No store to keep the findings in: the shard of texts and the decisions share them in
    one pass (the redactor is the stage's dearest step), and write what a run with one does."""
    source = SourceSpec(
        name="s", kind="code", path=STDLIB, include=("*.py", *(f"{p}/**/*.py" for p in STDLIB_PACKAGES))
    )
    ingest_source(source, tmp_path / "in", StageIO(tmp_path))
    groups = sum(pq.ParquetFile(p).num_row_groups for p in shard_files(tmp_path / "in"))
    calls = []
    redact = hygiene._redact
    monkeypatch.setattr(hygiene, "_redact", lambda *args: calls.append(1) or redact(*args))
    result = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "out", StageIO(tmp_path))
    assert groups > 1 and len(calls) == groups and result.summary.redacted_documents > 0


def test_hygiene_output_is_independent_of_worker_processes(tmp_path, local2):
    """Real stdlib code in several shards (a task each), inline vs two processes: byte-identical."""
    src = SourceSpec(name="s", kind="code", path=STDLIB, include=("*.py", *(f"{p}/**/*.py" for p in STDLIB_PACKAGES)))
    assert len(ingest_source(src, tmp_path / "in", StageIO(tmp_path), shard_mb=1).artifacts) >= 3
    one = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "one", StageIO(tmp_path))
    two = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "two", StageIO(tmp_path, local2))
    assert (
        [a.sha256 for a in one.artifacts] == [a.sha256 for a in two.artifacts]
        and one.summary.findings == two.summary.findings
        and one.summary.examples == two.summary.examples
    )
    assert one.summary.findings.get("E-mail", 0) > 0  # the email package's authors


def test_a_batch_is_measured_as_each_text_alone():
    """The filters' batch measures (RE2 over the column, a byte table, "\\n" lines) equal `re`
    and `splitlines` on each text: real files (non-ASCII ones among them) and
    the edges where the engines or the line rules differ."""
    import pyarrow as pa

    from albor_pipeline.stages.hygiene.filters import measure, measure_batch

    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))]
    assert any(not t.isascii() for t in texts)
    edges = ["", "\n", "a\n", "a\n\nb\n", "x\r\ny", "é 0x1F ٣٤\n" * 3, "\x0c\nz", "a" * 50 + "\n", "1 2 3", "Ⅻ_x"]
    for batch in (texts, edges, [*edges, *texts[:40]]):
        assert measure_batch(pa.array(batch), batch) == [measure(t) for t in batch]


# Phone numbers as people write them, with the country code: (text, the number).
PHONES = [
    ("Call me at +1 650-253-0000 for details.", "+1 650-253-0000"),
    ("New York office: +1 (212) 555-0100.", "+1 (212) 555-0100"),
    ("London: (+44) 20 7946 0958", "(+44) 20 7946 0958"),
    ("Bureau de Paris : +33 1 42 68 53 00", "+33 1 42 68 53 00"),
    ("Berlin, Tel. +49 30 901820", "+49 30 901820"),
    ("東京: +81 3-3580-3311", "+81 3-3580-3311"),
    ("Mumbai +91 98765 43210, mobile", "+91 98765 43210"),
    ("São Paulo: +55 11 98765-4321", "+55 11 98765-4321"),
    ("Sydney +61 2 9374 4000", "+61 2 9374 4000"),
    ("北京 +86 10 6552 9988", "+86 10 6552 9988"),
    ("Москва: +7 495 123-45-67", "+7 495 123-45-67"),
    ("Madrid +34 912 345 678.", "+34 912 345 678"),
    ('<a href="tel:+41446681800">Zürich</a>', "+41446681800"),
]
# Strings of code that look like one to a regex (a "+" then 7+ digits) but are not.
NOT_PHONES = [
    '__version__ = "1.0.0+20130313144700"',  # a semver build tag
    "total = offset+4915112345678",  # an operand
    "x = 1e+1234567",  # an exponent
    "limit = +2147483647",  # INT_MAX: no such number
    "ratio = +12125550100.5",  # a float
    "key = '+12125550100abc'",  # part of a longer token
    "price = Decimal('+35236450.6')",  # a decimal (as in _pydecimal's doctests)
    "z = (-1.00000000e+00+1.22464680e-16j)",  # numpy's repr of a complex number
    "chars = list('-+0123456789.')",  # PyYAML's resolver
]


def test_phone_numbers_are_redacted_and_counted():
    """Numbers from a dozen countries, in their own national formats after the country code:
    each becomes <PHONE_NUMBER>, counted once; the batch path finds what the per-text path does."""
    text = "\n".join(line for line, _ in PHONES) + "\n"
    found = SecretScanner().scan(text)
    redacted = found.redact(text)
    assert found.counts == {"Phone number": len(PHONES)} and redacted.count("<PHONE_NUMBER>") == len(PHONES)
    for line, number in PHONES:
        assert line.replace(number, "<PHONE_NUMBER>") in redacted
    batch = SecretScanner().scan(text, lines=candidate_lines(pa.array([text]))[0])
    assert sorted(batch.spans) == sorted(found.spans)
    assert SecretScanner().scan(redacted).counts == {}


def test_phone_detection_leaves_versions_dates_and_numeric_literals_alone():
    """Real files full of versions, dates, timestamps, IPs and numeric literals (numpy's
    complex reprs, PyYAML's number resolver hold "+" and digit runs the pre-filter passes):
    no phone number; nor in the strings of `NOT_PHONES`, each a pre-filter candidate."""
    numpy_root, stdlib = Path(numpy.__file__).parent, STDLIB
    files = [
        numpy_root / "fft" / "_pocketfft.py",
        numpy_root / "_core" / "function_base.py",
        numpy_root / "lib" / "_type_check_impl.py",
        Path(yaml.__file__).parent / "resolver.py",
        *(stdlib / name for name in ("datetime.py", "_pydecimal.py", "ipaddress.py", "uuid.py", "platform.py")),
        stdlib / "email" / "_parseaddr.py",
    ]
    texts = [path.read_text(encoding="utf-8") for path in files]
    assert sum(len(PHONE_RE.findall(t)) for t in texts) >= 20  # the detector really looks at them
    for text in texts:
        assert "Phone number" not in SecretScanner().scan(text).counts
    for line in NOT_PHONES:
        assert PHONE_RE.search(line), line
        assert SecretScanner().scan(line).counts == {}, line
