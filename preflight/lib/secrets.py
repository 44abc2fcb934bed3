"""Secrets never leave a rank: which variables are secret, and how they are compared.

A variable is secret when its *name* looks like a credential (TOKEN, SECRET, PASSWORD, KEY,
...) or its *value* does. Values are judged by two sets of shapes, whatever the variable is
called: our own (a URL with a password, `/` in it included; a password in a URL's query
string; a libpq / ODBC `password=` key; Slack webhooks; GitLab, Google, GitHub, Hugging Face,
AWS, OpenAI-style keys; JWTs; private keys) and the token shapes of Yelp's detect-secrets
plugins (the maintained detector: AWS, Azure storage, GitHub, GitLab, JWT, Slack, Stripe,
Twilio, SendGrid, PyPI, Discord, Telegram, Mailchimp, Square, OpenAI, private keys,
basic-auth URLs). Its value is replaced by `<redacted>` while the facts are gathered.

Scanning is bounded: every pattern of our own has bounded repetitions and starts on a literal
or a word boundary, so one value costs linear time, and a value longer than
`MAX_SCANNED_CHARS` is not scanned at all: it is redacted whole (nobody needs a 16 KiB value
in a report, and the keyed digest below still tells whether ranks agree on it).

Ranks still need to tell whether they hold the *same* secret (a drifting HF_TOKEN is worth a
finding), so once the c10d store has formed, every rank agrees on a random key through it
(channel/store_open.agree_on_key: first writer wins, nobody waits) and `seal` appends an HMAC of each secret
value under that key: `<redacted>:<12 hex>`. The key lives only in the ranks' memory and the
run's store, never in a report, so a digest in a report or --out-dir file cannot be
brute-forced back to a weak secret. Without a store (the --out-dir fallback) there is no
private key, and secrets stay a bare `<redacted>`: not compared, never guessable.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib
import re
import sys
import types
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

REDACTED = "<redacted>"
# A value longer than this is redacted without being scanned: bounded work per variable,
# and no report ever carries a huge value.
MAX_SCANNED_CHARS = 16 * 1024

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|(^|_)PASS($|_)|(^|_)PW($|_)|KEY|CREDENTIAL|(^|_)CREDS?($|_)|AUTH|"
    r"COOKIE|SESSION|PRIVATE|CERT|SIGNATURE|DSN|WEBHOOK|CONNECTION_STRING|(^|_)CONN_?STR",
    re.IGNORECASE,
)
# Names that match the pattern but carry configuration, not secrets.
_NOT_SECRET = {"SSH_AUTH_SOCK", "KEYTIMEOUT"}
# Values that are secrets whatever their variable is called. Every repetition is bounded and
# every alternative starts on a literal or a boundary: linear time on any input.
_SECRET_VALUE = re.compile(
    # scheme://user:password@host, the password may hold '/', ':' and more (not '@' or space)
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/@:]{0,256}:[^\s@]{1,256}@"
    # a password in a URL's query string or a key=value connection string (libpq, ODBC, JDBC)
    r"|(?<![A-Za-z0-9_])(?:password|passwd|pwd|pass|secret|token|access_token|api_?key|sslpassword)"
    r"\s{0,8}=\s{0,8}[^\s&;'\"]"
    r"|-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----"
    r"|:_authToken\s{0,8}=\s{0,8}\S"  # .npmrc
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20}|\bgithub_pat_[A-Za-z0-9_]{20}"
    r"|\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_-]{20}"
    r"|\bAIza[0-9A-Za-z_-]{35}"
    r"|\bhf_[A-Za-z0-9]{20}|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abposr]-[A-Za-z0-9-]{10}"
    r"|\bsk-[A-Za-z0-9_-]{20}|(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,1024}\.eyJ[A-Za-z0-9_-]{10}",  # JWT
    re.IGNORECASE,
)
# The detect-secrets plugins whose patterns are token shapes (not keywords, entropy or public IPs).
# Left out: jwt and npm, whose patterns backtrack quadratically (`eyJeyJ...`, `////...`); our
# own JWT and `:_authToken=` shapes above cover them in linear time.
_DETECT_SECRETS_PLUGINS = (
    "aws.AWSKeyDetector", "azure_storage_key.AzureStorageKeyDetector", "basic_auth.BasicAuthDetector",
    "discord.DiscordBotTokenDetector", "github_token.GitHubTokenDetector", "gitlab_token.GitLabTokenDetector",
    "mailchimp.MailchimpDetector", "openai.OpenAIDetector",
    "private_key.PrivateKeyDetector", "pypi_token.PypiTokenDetector", "sendgrid.SendGridDetector",
    "slack.SlackDetector", "square_oauth.SquareOAuthDetector", "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector", "twilio.TwilioKeyDetector",
)


@functools.lru_cache(maxsize=1)
def _detector_patterns() -> tuple[re.Pattern[str], ...]:
    """detect-secrets' token patterns; () where it is not installed (our own shapes still apply)."""
    patterns: list[re.Pattern[str]] = []
    with _unused_module_deferred("requests"):
        for spec in _DETECT_SECRETS_PLUGINS:
            module_name, class_name = spec.rsplit(".", 1)
            try:
                plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module_name}"), class_name)
            except (ImportError, AttributeError):
                continue
            patterns.extend(p for p in getattr(plugin, "denylist", ()) if isinstance(p, re.Pattern))
    return tuple(patterns)


@contextmanager
def _unused_module_deferred(name: str) -> Iterator[None]:
    """Within the block, `import <name>` gives a stand-in that imports the real module on first use.

    detect-secrets' plugin modules import `requests` for their online verification, which preflight
    never calls, and `requests` (urllib3, charset detection, http.client) was two thirds of the
    plugins' import: ~0.11 CPU-s on every rank of every run (issue 44). The stand-in forwards any
    attribute to the real module, imported then; unused, it leaves `sys.modules` with the block, so a
    later `import requests` (the user's, in a trainer) is an ordinary import. A module already
    imported is left as it is. (importlib's LazyLoader cannot do this before Python 3.12: the next
    `import` statement reads the module's `__spec__`, which loads it.) Its limit: the block lasts the
    plugins' import (~20 ms, once per process); another thread of the process that imports a submodule
    of `requests` (`requests.adapters`) within those milliseconds, the package never imported before,
    gets that submodule executed twice (two module objects, classes that are not each other).
    """
    if name in sys.modules:
        yield
        return
    stand_in = types.ModuleType(name, f"stands in for {name} until it is used (preflight.lib.secrets)")

    def first_use(attribute: str) -> object:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)

    stand_in.__getattr__ = first_use  # type: ignore[method-assign]  # a module's own __getattr__ (PEP 562)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


def is_secret_name(name: str) -> bool:
    """True when a variable's name suggests it holds a credential."""
    return name not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def is_secret_value(value: str) -> bool:
    """True when a value looks like a credential, or is too long to scan (bounded work)."""
    if len(value) > MAX_SCANNED_CHARS:
        return True
    if _SECRET_VALUE.search(value):
        return True
    return any(pattern.search(value) for pattern in _detector_patterns())


def is_secret(name: str, value: str) -> bool:
    """True when the name or the value looks like a credential."""
    return is_secret_name(name) or is_secret_value(value)


def is_redacted(value: str) -> bool:
    """True for `<redacted>` and `<redacted>:<digest>`."""
    return value == REDACTED or value.startswith(REDACTED + ":")


def digest(value: str, key: bytes) -> str:
    """`<redacted>:<12 hex>`: equal values give equal tags under one key, nothing more."""
    return f"{REDACTED}:{hmac.new(key, value.encode(errors='surrogatepass'), hashlib.sha256).hexdigest()[:12]}"


def redact_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of env with every secret-looking variable replaced by `<redacted>`."""
    return {name: REDACTED if is_secret(name, value) else value for name, value in env.items()}


_FLAG = re.compile(r"^(-{1,2}[A-Za-z0-9_.-]{1,64})(=)(.*)$", re.DOTALL)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,127})(=)(.*)$", re.DOTALL)


def redact_command(command: str) -> str:
    """A command line with its secrets replaced by `<redacted>`, word by word.

    A word whose value looks like a credential goes whole; `--password=x`, `--token x` and
    `DB_PASS=x` keep their flag or name and lose the value. Long command lines are cut.
    """
    words = command[:MAX_SCANNED_CHARS].split()
    out: list[str] = []
    redact_next = False
    for word in words:
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        named = _FLAG.match(word) or _ASSIGNMENT.match(word)
        if named and is_secret(named.group(1).lstrip("-").replace("-", "_"), named.group(3)):
            out.append(f"{named.group(1)}={REDACTED}")
        elif is_secret_value(word):
            out.append(REDACTED)
        elif word.startswith("-") and is_secret_name(word.lstrip("-").replace("-", "_")):
            out.append(word)
            redact_next = True
        else:
            out.append(word)
    return " ".join(out)


def seal(redacted: MutableMapping[str, str], raw: Mapping[str, str], key: bytes | None) -> None:
    """Replace each `<redacted>` value with its keyed digest (in place); no key: leave bare."""
    if not key:
        return
    for name, value in list(redacted.items()):
        if value == REDACTED and name in raw:
            redacted[name] = digest(raw[name], key)
