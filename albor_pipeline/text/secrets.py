"""Secrets and PII found in a text, and replaced by placeholders.

Secrets are found by detect-secrets' detectors (the tool BigCode used): AWS, GitHub,
GitLab, Slack, Stripe, npm, PyPI, OpenAI, JWT and other token formats, private key
blocks, and high-entropy strings assigned to a key/secret/token/password name; plus our
own patterns for what detect-secrets 1.5 lacks or finds only quoted after a name (GitHub's
fine-grained tokens, npm tokens outside an .npmrc, OpenAI's project keys, Hugging Face,
Anthropic, Google and W&B keys, AWS secret keys in prose, passwords of any length assigned to
a password name, Azure SAS signatures). A finding is the whole token: the
pattern's match (or its captured value, where it also matched the name) widened to the
run of token characters around it, since detect-secrets reports a pattern's group (the
GitHub prefix `ghp`) and some patterns stop short (Stripe's 24 of up to 99 characters,
the JWT before its signature). E-mail addresses (any script) and public IP addresses (not private,
loopback, link-local or documentation ranges) are found by regex; phone numbers written
with their country code (`+44 20 7946 0958`) by libphonenumber (`phonenumbers`), on the
runs of digits after a "+" that a regex finds. A line pre-filter sends only lines that
could hold a secret (or an address, or a number) to the detectors: for a batch,
one pass of Arrow's RE2 over every line of the column (`candidate_lines`), since Python's
`re` tries each alternative at every position and scans code at ~20 MB/s. Each finding
becomes a placeholder (`<KEY>`, `<EMAIL>`, `<IP_ADDRESS>`, `<PHONE_NUMBER>`), which is
ordinary text. A conversation is redacted message by message. Secrets are never logged:
only counts, and file paths redacted the same way.

Ingestion redacts secrets as it writes each document (a secret never reaches the data
dir); hygiene redacts e-mails, IP addresses and phone numbers (`stages/hygiene/hygiene.py`).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import string
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import pairwise
from typing import Any

import numpy as np
import phonenumbers
import pyarrow as pa
import pyarrow.compute as pc
from detect_secrets.filters.heuristic import is_potential_uuid, is_sequential_string, is_templated_secret
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from albor_pipeline.text.chat import conversation_json
from albor_pipeline.text.lines import ColumnLines

EMAIL, IP_ADDRESS, KEY, PHONE = "<EMAIL>", "<IP_ADDRESS>", "<KEY>", "<PHONE_NUMBER>"
PLACEHOLDERS = (EMAIL, IP_ADDRESS, KEY, PHONE)
# Found around each "@" (a literal the regex engine skips to fast), not by a regex tried at every position.
# Letters and digits of any script: internationalized addresses (`josé@exämple.de`, `用户@例子.广告`).
EMAIL_LOCAL = re.compile(r"[\w.%+-]{1,64}\Z")
EMAIL_DOMAIN = re.compile(r"[\w-]{1,63}(?:\.[\w-]{1,63})*\.(?:[^\W\d_]{2,}|xn--[A-Za-z0-9-]+)\b")  # and no "_"
IPV4_RE = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
IPV6_RE = re.compile(r"[0-9a-fA-F]{1,4}::?[0-9a-fA-F]{0,4}:[0-9a-fA-F:]{1,34}")
# What could be a phone number with its country code: a "+", then 7 to 17 digits, each pair
# apart by at most two of " ().-/" ("+1 (650) 253-0000", "+44 20 7946 0958"). Without a
# region, libphonenumber finds only such numbers; national ones ("(650) 253-0000") stay.
PHONE_RE = re.compile(r"\+[0-9](?:[ ().\-/]{0,2}[0-9]){6,16}")
# What cannot come right before a number (it would be an operand: `x+4930901820`, a
# version's `1.0+20130313144700`), and what after it means the run goes on (`.5`, `-12`).
PHONE_OPERAND = "_.)]"
PHONE_GOES_ON = re.compile(r"\w|[.\-/:][0-9]")
# What right after an address means it is part of something longer (`1.2.3.4.5`, `1.2.3.4.tar.gz`,
# `45.33.101.19_a`, a heading's `3.8.2.4:`); a "." that ends a sentence and a ":" before a port end it.
ADDRESS_GOES_ON = re.compile(r"\w|\.\w|:(?!\d)")
# Dotted numbers that are not addresses: versions, sections of a standard, and OIDs (2.5.29.17 in X.509 code).
NOT_AN_ADDRESS = re.compile(r"version|release|\boid|ObjectIdentifier|section|\brfc\b", re.IGNORECASE)
PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END[A-Z ]*PRIVATE KEY( BLOCK)?-----|\Z)", re.DOTALL
)
SECRET_NAME = re.compile(r"key|secret|token|passw|pwd|auth|credential", re.IGNORECASE)
# A name that ends in one saying password (`DB_PASSWORD`, `PGPASSWORD`, `db_pass`, `pwd`, not
# `bypass`), then a quoted dict key's or a subscript's end (`["password"] =`).
PASSWORD_NAME = r"""(?i:passw(?:or)?d|passphrase|(?<![A-Za-z])(?:pass|pwd))['"]?\]?[ \t]*"""
# A password: 8 to 64 characters, a letter and a digit among them, no space, quote, bracket or
# separator of code, not a template (`${X}`, `%(x)s`) nor a path (`/`, `~`, `.`).
PASSWORD_VALUE = r"""(?=[^\s'"]*[A-Za-z])(?=[^\s'"]*[0-9])(?![/~.]|\$\{|%\x28)[^\s'"(){}\[\]<>,;\\]{8,64}"""
LINE_END = r"(?=[ \t]*#|[ \t]*$)"  # what may follow an unquoted value: a comment
# Lines that could hold a secret; the detectors only see these (most code lines are not): a known
# token prefix or format, a long quoted token-like string (keys, entropy secrets and the rest are
# quoted), a line that says secret (a 40-character AWS key near) or wandb, or a password name assigned to.
CANDIDATE = re.compile(
    r"AKIA|ASIA|ABIA|ACCA|A3T|gh[pousr]_|github_pat_|gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941"
    r"|xox[abposr]-|hooks\.slack|eyJ|PRIVATE KEY|PuTTY-User|[rs]k_live_"
    r"|sk-|SG\.|npm_|pypi-|AccountKey=|-us\d|:AA|['\"][A-Za-z0-9+/=_.\-]{16,}['\"]"
    r"|hf_[A-Za-z0-9]{34}|api_org_|AIza|SK[0-9a-f]{32}|[?&]sig=|\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}"
    r"|(?i:wandb|secret)|(?i:pass|pwd)[\w.'\"\]-]*\s*[:=]"
)
# Lines that could hold an e-mail (a local-part character, or any non-ASCII one, right before the
# "@"), an address or a phone number.
PII_CANDIDATE = "|".join([r"(?:[A-Za-z0-9._%+-]|[^\x00-\x7f])@", IPV4_RE.pattern, IPV6_RE.pattern, PHONE_RE.pattern])
TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")  # what a finding widens over
EDGE = " \t\"'=:"  # delimiters a pattern may match around its token (Artifactory's)


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub's fine-grained personal access tokens, which detect-secrets 1.5 does not know."""

    secret_type = "GitHub Token"
    denylist = (re.compile(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"),)


class NpmTokenDetector(RegexBasedDetector):
    """npm access tokens anywhere (detect-secrets finds them only after `_authToken=`)."""

    secret_type = "NPM tokens"
    denylist = (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),)


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI's project, service-account and admin keys, whose `-` and `_` before the
    `T3BlbkFJ` marker detect-secrets' pattern does not allow."""

    secret_type = "OpenAI Token"
    denylist = (re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}"),)


class HuggingFaceTokenDetector(RegexBasedDetector):
    """Hugging Face user and organization tokens, anywhere (`export HF_TOKEN=hf_…`, `--token hf_…`)."""

    secret_type = "Hugging Face Token"
    denylist = (re.compile(r"(?<![A-Za-z0-9])(?:hf|api_org)_[A-Za-z0-9]{34}"),)


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API and admin keys (`sk-ant-api03-…`), anywhere."""

    secret_type = "Anthropic Key"
    denylist = (re.compile(r"sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{32,}"),)


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys (`AIza` and 35 characters), anywhere."""

    secret_type = "Google API Key"
    denylist = (re.compile(r"AIza[A-Za-z0-9_-]{35}"),)


class WandbKeyDetector(RegexBasedDetector):
    """Weights & Biases API keys (40 hex digits) after `WANDB_API_KEY`, `wandb.login(key=` or
    `wandb login`: a 40-hex run alone is a git SHA as often."""

    secret_type = "W&B Key"
    denylist = (
        re.compile(r"(?i:wandb)[\w.\s-]{0,20}?(?i:key|login).{0,16}?(?<![0-9A-Za-z])([0-9a-f]{40})(?![0-9A-Za-z])"),
    )


class AwsSecretKeyDetector(RegexBasedDetector):
    """A 40-character AWS secret access key on a line that says secret (`AWS_SECRET_ACCESS_KEY`,
    `SecretAccessKey`, "my AWS secret key is"), quoted or not (prose, comments, `export`):
    detect-secrets finds it only quoted after such a name. "aws" alone is on most lines of AWS
    SDKs' code. It must look random (`_looks_random`), which git SHAs, words and
    identifiers do not, and stand apart from a "." (`docs.aws.amazon.com/AmazonS3/…/Objects.html`)."""

    secret_type = "AWS Access Key"
    denylist = (
        re.compile(
            r"(?i:secret).*?(?<![A-Za-z0-9/+=.])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=]|\.\w)"
            r"|(?<![A-Za-z0-9/+=.])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=]|\.\w).*?(?i:secret)"
        ),
    )

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        yield from filter(_looks_random, super().analyze_string(string))


class AzureSasDetector(RegexBasedDetector):
    """The signature of an Azure shared access signature URL (`?sv=…&sig=…`): the rest of the
    URL stays."""

    secret_type = "Azure SAS Signature"
    denylist = (re.compile(r"[?&]sig=([A-Za-z0-9%+/=]{30,})"),)


class PasswordDetector(RegexBasedDetector):
    """A password (`PASSWORD_VALUE`) assigned to a password name, which the entropy detectors
    cannot flag under ~23 characters: quoted (`DB_PASSWORD = "Tr0ub4dor&3xK9"`), or unquoted as
    the rest of a line in YAML (`password: hunter2xyz`) or at the start of an .env or ini line
    (`DB_PASSWORD=hunter2xyz`), where code would be a call or a name (`password = get_password()`)."""

    secret_type = "Password"
    denylist = (
        re.compile(
            rf"""{PASSWORD_NAME}(?:(?::=|=>|[:=])[ \t]*[rbuf]?['"]({PASSWORD_VALUE})['"]"""
            rf"|:[ \t]+({PASSWORD_VALUE}){LINE_END})"
            rf"|^(?:export[ \t]+|set[ \t]+)?[\w.-]*{PASSWORD_NAME}=[ \t]*({PASSWORD_VALUE}){LINE_END}"
        ),
    )


@dataclass
class Findings:
    """What a scan found in one text, by type (values never leave this object)."""

    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, placeholder)
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, start: int, end: int, kind: str, placeholder: str) -> None:
        self.spans.append((start, end, placeholder))
        self.counts[kind] += 1

    def redact(self, text: str) -> str:
        """`text` with every finding replaced by its placeholder; overlapping findings merge
        into one placeholder (the first one's)."""
        out, pos = [], 0
        merged: list[list[Any]] = []
        for start, end, placeholder in sorted(self.spans):
            if merged and start < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end, placeholder])
        for start, end, placeholder in merged:
            out += [text[pos:start], placeholder]
            pos = end
        out.append(text[pos:])
        return "".join(out)


class SecretScanner:
    """detect-secrets' detectors (and ours) plus e-mail and public-IP regexes, over one text at a time."""

    REGEX_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
        ArtifactoryDetector,
        AWSKeyDetector,
        AzureStorageKeyDetector,
        DiscordBotTokenDetector,
        GitHubTokenDetector,
        GitLabTokenDetector,
        JwtTokenDetector,
        MailchimpDetector,
        NpmDetector,
        OpenAIDetector,
        PrivateKeyDetector,
        PypiTokenDetector,
        SendGridDetector,
        SlackDetector,
        StripeDetector,
        TelegramBotTokenDetector,
        TwilioKeyDetector,
        GitHubFineGrainedTokenDetector,
        NpmTokenDetector,
        OpenAIProjectKeyDetector,
        HuggingFaceTokenDetector,
        AnthropicKeyDetector,
        GoogleApiKeyDetector,
        WandbKeyDetector,
        AwsSecretKeyDetector,
        AzureSasDetector,
        PasswordDetector,
    )

    @cached_property
    def _plugins(self) -> list[RegexBasedDetector]:
        # Private key blocks are found whole by PRIVATE_KEY_BLOCK; the plugin matches only a header.
        return [plugin() for plugin in self.REGEX_PLUGINS if plugin is not PrivateKeyDetector]

    @cached_property
    def _entropy(self) -> list[Base64HighEntropyString | HexHighEntropyString]:
        return [Base64HighEntropyString(limit=4.5), HexHighEntropyString(limit=3.0)]

    @cached_property
    def _detectors(self) -> list[tuple[RegexBasedDetector, re.Pattern[str]]]:
        """Every (plugin, pattern), in the order findings are taken."""
        return [(plugin, regex) for plugin in self._plugins for regex in plugin.denylist]

    @cached_property
    def _screens(self) -> list[tuple[int, str | None]]:
        """(the bits of its patterns, RE2's pattern) of each plugin, then SECRET_NAME's: its
        patterns as RE2 reads them, as one (one pass per plugin: GitLab has seven), lookarounds
        dropped and bounded repeats left open (RE2 allows none over 1000, and compiles a bound
        as copies), which only widens what they match (None: RE2 still cannot; those detectors
        see every candidate line)."""
        screens, k = [], 0  # the plugin's first bit (`_detectors` lists each plugin's patterns in a row)
        for plugin in self._plugins:
            n = len(list(plugin.denylist))
            screens.append((((1 << n) - 1) << k, _re2_union(list(plugin.denylist))))
            k += n
        return [*screens, (1 << k, _re2_union([SECRET_NAME]))]

    def screen(self, lines: pa.Array) -> np.ndarray:
        """Per candidate line, a bit per detector (the last for SECRET_NAME) that may match it:
        one RE2 pass per plugin over the column. On printable ASCII (and tabs) RE2 and `re`
        agree; a line with any other character gets every bit (`re`'s Unicode classes)."""
        bits = np.zeros(len(lines), np.int64)
        for mask, pattern in self._screens:
            hit = True if pattern is None else pc.match_substring_regex(lines, pattern).to_numpy(zero_copy_only=False)
            bits |= np.where(hit, mask, 0)
        other = pc.match_substring_regex(lines, r"[^\t\x20-\x7e]").to_numpy(zero_copy_only=False)
        return np.where(other, ALL_DETECTORS, bits)

    def _secrets_in_line(self, line: str, bits: int = -1) -> list[tuple[str, int, int]]:
        """(kind, start, end) of each secret on a candidate line: whole tokens; overlapping
        findings merge into one of the first detector's kind. `bits`: the detectors that may
        match (`screen`), all by default."""
        found: list[tuple[str, int, int]] = []

        def add(kind: str, start: int, end: int) -> None:
            for i, (first, s, e) in enumerate(found):
                if start < e and s < end:
                    found[i] = (first, min(s, start), max(e, end))
                    return
            found.append((kind, start, end))

        for k, (plugin, regex) in enumerate(self._detectors):
            for match in regex.finditer(line) if bits >> k & 1 else ():
                # The plugin's own validation of what matched (a JWT's parts must decode).
                if next(iter(plugin.analyze_string(match.group())), None) is not None:
                    add(plugin.secret_type, *_token_span(line, match))
        # High entropy counts only when assigned to a secret-ish name.
        if bits >> len(self._detectors) & 1 and SECRET_NAME.search(line):
            for entropy in self._entropy:
                for raw in filter(partial(_high_entropy, entropy), entropy.analyze_string(line)):
                    at = line.find(raw)
                    while at >= 0:
                        add("High Entropy String", *_widen(line, at, at + len(raw)))
                        at = line.find(raw, at + len(raw))
        return found

    def scan(self, text: str, secrets: bool = True, pii: bool = True, lines: Lines | None = None) -> Findings:
        """What `text` holds: secrets (tokens, keys), PII (e-mail and public IP addresses, phone
        numbers), or both.
        `lines`: where to look, from `candidate_lines` (else found here, line by line)."""
        found = Findings()
        if secrets:
            for match in PRIVATE_KEY_BLOCK.finditer(text):
                found.add(match.start(), match.end(), "Private Key", KEY)
            for offset, bits, line in _lines_at(text, _candidate_starts(text) if lines is None else lines.secrets):
                for kind, start, end in self._secrets_in_line(line, bits):
                    found.add(offset + start, offset + end, kind, KEY)
        if pii:
            for offset, _, line in [(0, ALL_DETECTORS, text)] if lines is None else _lines_at(text, lines.pii):
                _scan_pii(line, offset, found)
        return found


@dataclass(frozen=True)
class Lines:
    """Where in a text the detectors look: (start, detector bits) of each line that could hold
    a secret, and of each line that could hold an e-mail or an IP address. A finding never
    spans lines."""

    secrets: Sequence[tuple[int, int]]
    pii: Sequence[tuple[int, int]]


ALL_DETECTORS = -1  # every bit set: a line every detector sees
LOOKAROUND = re.compile(r"\(\?<?[!=][^()]*\)")  # what RE2 lacks (not nested in the detectors' patterns)
RE2_OPEN_REPEAT = re.compile(r"\{(\d+),\d+\}")  # {m,n}: RE2 compiles n copies, {m,} m and a loop


def _re2_union(regexes: list[re.Pattern[str]]) -> str | None:
    """`regexes` as one RE2 pattern that matches wherever one of them may (`_screens`), or None."""
    parts = []
    for regex in regexes:
        relaxed = RE2_OPEN_REPEAT.sub(r"{\1,}", LOOKAROUND.sub("", regex.pattern))
        if regex.flags & re.VERBOSE and any(c.isspace() or c == "#" for c in regex.pattern):
            return None
        parts.append(f"(?:{'(?i)' if regex.flags & re.IGNORECASE else ''}{relaxed})")
    try:
        pc.match_substring_regex(pa.array([""]), "|".join(parts))
    except pa.ArrowInvalid:
        return None
    return "|".join(parts)


def _candidate_starts(text: str) -> Iterator[tuple[int, int]]:
    """The start of each line of `text` where `CANDIDATE` matches (one text, Python's `re`)."""
    scanned = -1  # the end of the last line given
    for candidate in CANDIDATE.finditer(text):
        offset = text.rfind("\n", 0, candidate.start()) + 1
        if offset > scanned:
            end = text.find("\n", candidate.end())
            scanned = len(text) if end < 0 else end
            yield offset, ALL_DETECTORS


def _lines_at(text: str, starts: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int, str]]:
    for offset, bits in starts:
        end = text.find("\n", offset)
        yield offset, bits, text[offset : len(text) if end < 0 else end]


def candidate_lines(texts: pa.Array | pa.ChunkedArray, secrets: bool = True, pii: bool = True) -> list[Lines]:
    """`Lines` of every text of a column: one pass of Arrow's RE2 over all their lines (the
    patterns are ASCII, so RE2's ASCII classes find what `re` finds)."""
    lines = ColumnLines.of(texts)
    n = len(lines.first)

    def hits(pattern: str, wanted: bool, screen: bool) -> list[list[tuple[int, int]]]:
        if not wanted:
            return [[] for _ in range(n)]
        rows = lines.matching(pattern)
        bits = scanner().screen(lines.flat.take(rows)) if screen else np.full(len(rows), ALL_DETECTORS)
        rows, bits = rows[bits != 0], bits[bits != 0]  # lines no detector can match
        found = list(zip(lines.starts[rows].tolist(), bits.tolist()))
        return [found[lo:hi] for lo, hi in pairwise(np.searchsorted(lines.owner[rows], np.arange(n + 1)))]

    return [Lines(s, p) for s, p in zip(hits(CANDIDATE.pattern, secrets, True), hits(PII_CANDIDATE, pii, False))]


def _scan_pii(text: str, offset: int, found: Findings) -> None:
    """E-mails, public IP addresses and phone numbers in `text`, which starts at `offset` of
    the scanned text."""
    at = text.find("@")
    while at >= 0:
        local = EMAIL_LOCAL.search(text, max(0, at - 64), at)
        domain = EMAIL_DOMAIN.match(text, at + 1)
        if local and domain and local.group()[0].isalnum() and "_" not in domain.group():
            found.add(offset + local.start(), offset + domain.end(), "E-mail", EMAIL)
        at = text.find("@", at + 1)
    for regex in (IPV4_RE, IPV6_RE):
        for match in regex.finditer(text):
            start, end = match.span()
            bounded = not _token_char(text, start - 1) and not ADDRESS_GOES_ON.match(text, end)
            if bounded and _public_ip(match.group()) and not _not_an_address(text, start):
                found.add(offset + start, offset + end, "IP address", IP_ADDRESS)
    for match in PHONE_RE.finditer(text):
        for start, end in _phone_numbers(text, match):
            found.add(offset + start, offset + end, "Phone number", PHONE)


def _phone_numbers(text: str, candidate: re.Match[str]) -> Iterator[tuple[int, int]]:
    """The spans of the phone numbers libphonenumber finds in a `PHONE_RE` candidate (and the
    "(" before it: "(+44) 20 ..."), valid for their country's numbering plan (lengths, prefixes),
    that are no part of code's numbers (`_not_a_phone_number`)."""
    start = candidate.start() - (text[candidate.start() - 1 : candidate.start()] == "(")
    window = text[start : candidate.end()]
    for number in phonenumbers.PhoneNumberMatcher(window, None, leniency=phonenumbers.Leniency.VALID):
        begin, end = start + number.start, start + number.end
        if not _not_a_phone_number(text, begin, end):
            yield begin, end


def _not_a_phone_number(text: str, begin: int, end: int) -> bool:
    """A number in code: an operand (`x+4930901820`, a version's `1.0+20130313144700`), a run
    that goes on (`+12125550100abc`, `+12125550100.5`), or a decimal (`Decimal('+35236450.6')`:
    one "." its only separator; a number written with dots has one between every group)."""
    before = text[begin - 1 : begin]
    operand = before != "" and (before.isalnum() or before in PHONE_OPERAND)
    separators = [c for c in text[begin + 1 : end] if not c.isdigit()]
    return operand or bool(PHONE_GOES_ON.match(text, end)) or separators == ["."]


def _placeholder(value: str) -> bool:
    return any(p in value for p in PLACEHOLDERS)


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """`text[start:end]` widened to the whole run of token characters around it."""
    while start > 0 and text[start - 1] in TOKEN_CHARS:
        start -= 1
    while end < len(text) and text[end] in TOKEN_CHARS:
        end += 1
    return start, end


def _token_span(text: str, match: re.Match[str]) -> tuple[int, int]:
    """The whole token a detector's match found: its captured groups (the value, where the
    pattern also matched the name it is assigned to; or a part of the token, as GitHub's
    prefix) or else the match, less edge delimiters, widened to the run of token characters."""
    groups = [match.span(g) for g in range(1, match.re.groups + 1) if match.group(g)]
    start, end = (min(s for s, _ in groups), max(e for _, e in groups)) if groups else match.span()
    while start < end - 1 and text[start] in EDGE:
        start += 1
    while end > start + 1 and text[end - 1] in EDGE:
        end -= 1
    return _widen(text, start, end)


def _high_entropy(plugin: Base64HighEntropyString | HexHighEntropyString, raw: str) -> bool:
    """detect-secrets' own tests of a quoted string: entropy over the limit, and not a UUID,
    a sequence or a template."""
    return (
        plugin.calculate_shannon_entropy(raw) >= plugin.entropy_limit
        and not is_potential_uuid(raw)
        and not is_sequential_string(raw)
        and not is_templated_secret(raw)
        and not _placeholder(raw)
    )


def _token_char(text: str, at: int) -> bool:
    """Whether text[at], right before a match, makes it part of something longer."""
    return 0 <= at < len(text) and (text[at].isalnum() or text[at] in "._:")


AWS_SECRET_BITS = 4.3  # a random 40-character key has less once in a thousand; identifiers stay near 4.0


def _looks_random(value: str) -> bool:
    """Letters of both cases, a digit, and `AWS_SECRET_BITS` of entropy per character."""
    return (
        any(c.islower() for c in value)
        and any(c.isupper() for c in value)
        and any(c.isdigit() for c in value)
        and -sum(n / len(value) * math.log2(n / len(value)) for n in Counter(value).values()) >= AWS_SECRET_BITS
    )


def _public_ip(value: str) -> bool:
    try:
        return ipaddress.ip_address(value).is_global
    except ValueError:
        return False


def _not_an_address(text: str, at: int) -> bool:
    """A dotted number on a line about versions or OIDs (`__version__ = "1.2.3.4"`, `oid =
    "2.5.29.17"`) or prefixed by "v" is not an address; nor are IPv6-looking tokens of fewer
    than three groups (`a[1::2]`)."""
    line_start = text.rfind("\n", 0, at) + 1
    line_end = text.find("\n", at)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    token = IPV6_RE.match(text, at)
    few_groups = token is not None and len([g for g in token.group().split(":") if g]) < 3
    return bool(NOT_AN_ADDRESS.search(line)) or text[at - 1 : at] in ("v", "V") or few_groups


_SCANNER: SecretScanner | None = None


def scanner() -> SecretScanner:
    """This process's scanner (its detectors are built once)."""
    global _SCANNER
    _SCANNER = _SCANNER or SecretScanner()
    return _SCANNER


def redact_path(path: str) -> str:
    """`path` with its e-mails, public IPs and secrets replaced by their placeholders: every
    file path a stage records (examples in metadata, manifests, provenance, the event log)
    goes through here, since a file name can hold an address or a token as well as a text."""
    found = scanner().scan(path)
    return found.redact(path) if found.spans else path


def redacted_json(value: Any, secrets: bool = True, pii: bool = True) -> tuple[Any, Counter[str]]:
    """`value` (parsed JSON: a conversation, an eval item) with every string in it redacted on
    its own, so a placeholder never cuts a JSON escape and a list keeps its length; the
    findings by type."""
    found: Counter[str] = Counter()

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            scan = scanner().scan(value, secrets, pii)
            found.update(scan.counts)
            return scan.redact(value) if scan.spans else value
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return clean(value), found


def _redacted_conversation(text: str, secrets: bool, pii: bool) -> tuple[str, Counter[str]]:
    """A conversation's canonical JSON with every message's text (and every part's) redacted."""
    messages, counts = redacted_json(json.loads(text), secrets, pii)
    return (conversation_json(messages) if counts else text), counts


def redacted(
    text: str, conversation: bool = False, secrets: bool = True, pii: bool = True, lines: Lines | None = None
) -> tuple[str, Counter[str]]:
    """(`text` with every finding of the kinds asked for replaced, the findings by type);
    `text` itself when none. `conversation`: a conversation's canonical JSON. `lines`: where
    to look, from `candidate_lines` over the batch the text is in."""
    if conversation:
        return _redacted_conversation(text, secrets, pii)
    found = scanner().scan(text, secrets, pii, lines)
    return (found.redact(text) if found.spans else text), found.counts
