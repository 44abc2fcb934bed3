"""Store authentication: a per-run secret proves that a value in the store comes from this run.

c10d's TCPStore has no authentication: any process that reaches MASTER_ADDR:MASTER_PORT can
read and write every key. When the ranks share a secret through a channel the launcher
provides (`PREFLIGHT_SECRET` in every rank's environment: `preflight launch` sets a random
one; a batch script can `export PREFLIGHT_SECRET=$(openssl rand -hex 16)` before `srun`,
which hands the environment to every task), every value that decides the verdict carries an
HMAC-SHA256 under it:

- the owner mark rank 0 writes into the store it hosts: a rank whose secret differs (another
  job on the same port, or a job script that set it on some ranks only) refuses the store
  (PORT004) instead of publishing into it;
- each rank's payload (`auth/<rank>`, over the run's nonce, the rank and the payload's
  SHA-256): rank 0 refuses a payload without a valid proof (RUN002), so a foreign process
  cannot stand in for an absent rank or add findings;
- go and verdict: a rank ignores a decision without a valid proof, so a foreign process
  cannot end the run with exit 0.

And the keyed digests of redacted secrets (lib/secrets.py) are keyed by the secret instead of
a key agreed through the store, which anyone connected could read.

What it does not protect: confidentiality (a connected process still reads the payloads,
whose secrets are redacted anyway), the --out-dir files (plain files; protect the folder), and
a process that has the secret (any process of the job's user that can read the ranks'
environment). Without PREFLIGHT_SECRET nothing is checked, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from preflight.model.codec import encode

SECRET_VAR = "PREFLIGHT_SECRET"
T = TypeVar("T")


def run_secret(env: Mapping[str, str] | None = None) -> bytes | None:
    """This run's shared secret from the environment, or None when the launcher gave none."""
    value = (os.environ if env is None else env).get(SECRET_VAR, "")
    return value.encode() if value else None


def proof(secret: bytes, *parts: str | bytes) -> str:
    """HMAC-SHA256 (hex) over the parts, each length-prefixed so no two part lists collide."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        mac.update(len(data).to_bytes(8, "big"))
        mac.update(data)
    return mac.hexdigest()


def valid(secret: bytes, claimed: object, *parts: str | bytes) -> bool:
    """Whether `claimed` is the proof of these parts under the secret (constant-time)."""
    # As bytes: compare_digest refuses a str with non-ASCII characters (a foreign client's proof).
    return isinstance(claimed, str) and hmac.compare_digest(claimed.encode(), proof(secret, *parts).encode())


def payload_proof(secret: bytes, nonce: str, rank: int, text: str | bytes) -> str:
    """The proof a rank publishes beside its payload (`auth/<rank>`)."""
    data = text.encode() if isinstance(text, str) else text
    return proof(secret, "payload", nonce, str(rank), hashlib.sha256(data).digest())


def valid_payload(secret: bytes, claimed: str, nonce: str, rank: int, text: str | bytes) -> bool:
    """Whether `claimed` is the proof of this rank's payload under the secret (constant-time)."""
    return isinstance(claimed, str) and hmac.compare_digest(claimed.encode(),
                                                            payload_proof(secret, nonce, rank, text).encode())


def signed(secret: bytes | None, key: str, value: T) -> T:
    """A decision (a model type with a `proof` field) with its proof under `key`; as it is without a secret."""
    if not secret:
        return value
    return msgspec.structs.replace(value, proof=proof(secret, key, _unproven(value)))  # type: ignore[type-var]


def proven(secret: bytes, key: str, value: Any) -> bool:
    """Whether a decision's `proof` is the proof of the rest of it under `key` (constant-time)."""
    return valid(secret, value.proof, key, _unproven(value))


def _unproven(value: Any) -> bytes:
    """What the proof covers: the value as the codec writes it, its proof left empty."""
    return encode(msgspec.structs.replace(value, proof=""))


def digest_key(secret: bytes) -> bytes:
    """The key of the redacted secrets' digests, derived from the run's secret."""
    return proof(secret, "secret digests").encode()
