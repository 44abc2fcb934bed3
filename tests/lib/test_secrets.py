"""Secrets: names and values that are redacted, and the store-agreed digest key."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest

from preflight.channel.store_open import agree_on_key
from preflight.lib.secrets import REDACTED, digest, is_secret, redact_environment, seal


@pytest.mark.parametrize("name", ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_PASSWD",
                                  "GPG_PASSPHRASE", "SMTP_PASS", "DB_PW", "GOOGLE_APPLICATION_CREDENTIALS",
                                  "BASIC_AUTH", "JUPYTER_COOKIE", "SESSION_ID", "AZURE_STORAGE_CONNECTION_STRING",
                                  "SENTRY_DSN", "TLS_PRIVATE_KEY", "github_token"])
def test_secret_names(name: str) -> None:
    assert is_secret(name, "x")


@pytest.mark.parametrize("name", ["NCCL_IB_HCA", "PATH", "PWD", "SSH_AUTH_SOCK", "OMP_NUM_THREADS", "PASSAGE"])
def test_plain_names(name: str) -> None:
    assert not is_secret(name, "value")


@pytest.mark.parametrize("value", ["postgres://user:hunter2@db:5432/x", "https://u:p@host/path",
                                   "hf_" + "a" * 30, "AKIAABCDEFGHIJKLMNOP", "ghp_" + "b" * 36,
                                   "-----BEGIN RSA PRIVATE KEY-----"])
def test_secret_values_under_plain_names(value: str) -> None:
    assert redact_environment({"SOME_URL": value}) == {"SOME_URL": REDACTED}


def test_plain_url_is_kept() -> None:
    assert redact_environment({"INDEX_URL": "https://pypi.org/simple"}) == {"INDEX_URL": "https://pypi.org/simple"}


def test_ranks_agree_on_a_random_key_through_a_real_store() -> None:
    from torch.distributed import PrefixStore, TCPStore

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=5), wait_for_workers=False)
    client = TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=5))
    keys = [agree_on_key(PrefixStore("preflight/run", store)) for store in (server, client, server)]
    assert keys[0] and len(set(keys)) == 1 and len(keys[0]) >= 32
    other_run = agree_on_key(PrefixStore("preflight/other", server))
    assert other_run != keys[0]  # a fresh random key per run: a digest says nothing across runs


def test_seal_adds_digests_only_with_a_key() -> None:
    raw = {"HF_TOKEN": "abc", "PATH": "/bin"}
    env = redact_environment(raw)
    seal(env, raw, None)
    assert env == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
    seal(env, raw, b"k" * 32)
    assert env["HF_TOKEN"] == digest("abc", b"k" * 32) and "abc" not in env["HF_TOKEN"]
    assert agree_on_key(None) is None


def test_every_issue_17_shape_is_redacted_under_an_innocuous_name() -> None:
    from tests.helpers.secret_shapes import shapes

    for name, (value, _) in shapes().items():
        assert redact_environment({name: value}) == {name: REDACTED}, name


@pytest.mark.parametrize("value", ["https://pypi.org/simple", "/usr/local/cuda/bin:/usr/bin", "mlx5_0:1,mlx5_1:1",
                                   "eth0", "1", "host=db port=5432", "--pass-through", "a" * 16384,
                                   "file:///data/train", "bypass=1"])
def test_plain_values_are_kept(value: str) -> None:
    assert redact_environment({"SOME_SETTING": value}) == {"SOME_SETTING": value}


# In a fresh interpreter (this one may have imported requests): detect-secrets' patterns, whether the
# plugins' `requests` import left requests imported, and what a later `import requests` gives.
_PATTERNS_AND_REQUESTS = """
import json, sys
{first}
from preflight.lib import secrets
patterns = [(p.pattern, p.flags) for p in secrets._detector_patterns()]
imported_after = "requests" in sys.modules or "urllib3" in sys.modules
import requests
from detect_secrets.plugins import stripe
print(json.dumps({{"patterns": patterns, "imported_after": imported_after, "same_module": requests is before,
                  "ordinary": type(requests).__name__ == "module" and callable(requests.get),
                  "plugin_sees_it": stripe.requests.exceptions.RequestException is requests.exceptions.RequestException,
                  "stripe_key": secrets.is_secret_value("sk_live_" + "a1B2" * 6)}}))
"""


def _patterns_and_requests(first: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PATTERNS_AND_REQUESTS.format(first=first)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_detect_secrets_patterns_are_read_without_importing_requests_and_the_same_as_with_it() -> None:
    """The plugins import `requests` only for online verification, never called here: it is not imported
    for them (issue 44: two thirds of their import), yet the patterns are the same as where the process
    had imported it already, and a later `import requests` is the ordinary, whole module."""
    deferred = _patterns_and_requests("before = None")
    already = _patterns_and_requests("import requests; before = requests")
    assert deferred["patterns"] and deferred["patterns"] == already["patterns"]
    assert not deferred["imported_after"] and already["imported_after"] and already["same_module"]
    for run in (deferred, already):
        assert run["ordinary"] and run["plugin_sees_it"] and run["stripe_key"], run
