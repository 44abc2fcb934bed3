"""Secrets never leave a rank: which variables are secret, and how they are compared.

A variable is secret when its *name* looks like a credential (TOKEN, SECRET, PASSWORD, KEY,
...) or its *value* does (a URL with a password in it, a private key, a well-known token
shape). Its value is replaced by `<redacted>` while the facts are gathered.

Ranks still need to tell whether they hold the *same* secret (a drifting HF_TOKEN is worth a
finding), so once the c10d store has formed, every rank agrees on a random key through it
(`agree_on_key`: first writer wins, nobody waits) and `seal` appends an HMAC of each secret
value under that key: `<redacted>:<12 hex>`. The key lives only in the ranks' memory and the
run's store, never in a report, so a digest in a report or --out-dir file cannot be
brute-forced back to a weak secret. Without a store (the --out-dir fallback) there is no
private key, and secrets stay a bare `<redacted>`: not compared, never guessable.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, MutableMapping
from typing import Any

REDACTED = "<redacted>"
KEY_NAME = "secret-key"  # store key (under the run's prefix) of the agreed HMAC key

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|(^|_)PASS($|_)|(^|_)PW($|_)|KEY|CREDENTIAL|(^|_)CREDS?($|_)|AUTH|"
    r"COOKIE|SESSION|PRIVATE|CERT|SIGNATURE|DSN|WEBHOOK|CONNECTION_STRING|(^|_)CONN_?STR",
    re.IGNORECASE,
)
# Names that match the pattern but carry configuration, not secrets.
_NOT_SECRET = {"SSH_AUTH_SOCK", "KEYTIMEOUT"}
# Values that are secrets whatever their variable is called.
_SECRET_VALUE = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"  # scheme://user:password@host
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}|\b(AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}",  # JWT
)


def is_secret_name(name: str) -> bool:
    """True when a variable's name suggests it holds a credential."""
    return name not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def is_secret(name: str, value: str) -> bool:
    """True when the name or the value looks like a credential."""
    return is_secret_name(name) or bool(_SECRET_VALUE.search(value))


def is_redacted(value: str) -> bool:
    """True for `<redacted>` and `<redacted>:<digest>`."""
    return value == REDACTED or value.startswith(REDACTED + ":")


def digest(value: str, key: bytes) -> str:
    """`<redacted>:<12 hex>`: equal values give equal tags under one key, nothing more."""
    return f"{REDACTED}:{hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:12]}"


def redact_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of env with every secret-looking variable replaced by `<redacted>`."""
    return {name: REDACTED if is_secret(name, value) else value for name, value in env.items()}


def agree_on_key(store: Any) -> bytes | None:
    """A random key every rank of this run gets from the store (first writer wins), or None.

    compare_set with an empty expected value sets the key only when it is absent and returns
    whatever the store holds, so no rank waits for another and all end with the same key.
    """
    if store is None:
        return None
    try:
        agreed = store.compare_set(KEY_NAME, "", secrets.token_hex(32))
    except Exception:  # a store that went away: no key, secrets stay bare
        return None
    return bytes(agreed) if agreed else None


def seal(redacted: MutableMapping[str, str], raw: Mapping[str, str], key: bytes | None) -> None:
    """Replace each `<redacted>` value with its keyed digest (in place); no key: leave bare."""
    if not key:
        return
    for name, value in list(redacted.items()):
        if value == REDACTED and name in raw:
            redacted[name] = digest(raw[name], key)
