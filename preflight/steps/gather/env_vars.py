"""The rank's environment, redacted before it leaves the process (see lib/secrets.py).

Secret-looking variables become `<redacted>` here; the runner later appends a keyed digest
(`secrets.seal`) once the ranks share a private key through the store, so rank 0 can tell
whether two ranks hold the same value without ever seeing it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from preflight.lib.secrets import REDACTED, is_secret, is_secret_name, redact_environment
from preflight.model import RankFacts
from preflight.model.codec import valid_text

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

__all__ = ["REDACTED", "gather", "is_secret", "is_secret_name", "redact_environment"]


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.env with this process's environment, secrets as a bare `<redacted>`."""
    # As the other ranks' environments reach rank 0: a value of bytes that are not UTF-8 escaped (codec.valid_text).
    facts.env = redact_environment({valid_text(name): valid_text(value) for name, value in os.environ.items()})
