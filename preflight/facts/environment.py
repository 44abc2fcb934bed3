"""The rank's environment, redacted before it leaves the process.

Variables whose names look secret are replaced by `<redacted>` plus a salted hash, so
rank 0 can still tell whether two ranks hold the same value without ever seeing it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.facts import GatherOptions

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|(^|_)PASS($|_)|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT|SIGNATURE|DSN|WEBHOOK",
    re.IGNORECASE,
)
# Names that match the pattern but carry configuration, not secrets.
_NOT_SECRET = {"SSH_AUTH_SOCK", "KEYTIMEOUT"}


def is_secret_name(name: str) -> bool:
    """True when a variable's name suggests it holds a credential."""
    return name not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def redact_value(value: str, salt: str) -> str:
    """`<redacted>:<12 hex>`: equal values give equal tags within one run, nothing more."""
    digest = hmac.new(salt.encode(), value.encode(), hashlib.sha256).hexdigest()[:12]
    return f"{REDACTED}:{digest}"


def redact_environment(env: Mapping[str, str], salt: str) -> dict[str, str]:
    """A copy of env with every secret-looking variable redacted."""
    return {
        name: redact_value(value, salt) if is_secret_name(name) else value for name, value in env.items()
    }


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.env with this process's redacted environment."""
    facts.env = redact_environment(os.environ, options.salt)
