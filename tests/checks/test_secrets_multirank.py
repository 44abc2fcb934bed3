"""Secrets never leave a rank: distinct secrets planted on every rank of a real run.

Every output is searched for every planted value: each rank's stdout/stderr (the terminal
text), the JSON report, --text, --html, the rich terminal rendering of the report, and every
file under --out-dir, whose rank-N.<nonce>.json files hold exactly the payload each rank published to
the c10d store. Besides the secrets under secret-looking names, every value shape of
tests/helpers/secret_shapes.py (issue 17's leaks included) is planted under an innocuous name,
and a 120 KB value that must be neither printed nor slow to scan.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from pathlib import Path

from preflight.channel.wire import SharedSections, from_wire
from preflight.model import RankFacts
from preflight.model.codec import from_builtins
from preflight.model.rank_table import RankTable
from preflight.model.rank_unpack import unpack
from preflight.reports import json as json_report
from preflight.reports import terminal
from tests.helpers.ranks import Placement, read_json, spawn_env_ranks
from tests.helpers.secret_shapes import shapes

WORLD = 3


def planted(rank: int) -> dict[str, str]:
    """Secrets a rank holds: by name, by value shape, and a weak one (guessable by brute force)."""
    return {
        "HF_TOKEN": f"hf_pf3SecretHuggingFace{rank}xxxxxxxxxxxx",
        "WANDB_API_KEY": f"pf3-wandb-key-{rank}-0123456789abcdef",
        "AWS_SECRET_ACCESS_KEY": f"pf3/aws/secret/{rank}/ABCDEFGHIJ",
        "MY_DB_PASSWORD": f"hunter{rank}",  # weak on purpose
        "DATABASE_URL": f"postgres://trainer:pf3dbpass{rank}@db.internal:5432/runs",
        "NCCL_IB_SESSION": f"pf3-session-{rank}",
        **{name: value for name, (value, _) in shapes(rank).items()},
        "BIG_BLOB": f"pf3blob{rank}" + "q" * 120_000,  # 27 s to scan before issue 17; never printed whole
    }


def markers(rank: int) -> set[str]:
    """What must never appear: every planted value, and the secret part of every shape."""
    return {*planted(rank).values(), *(marker for _, marker in shapes(rank).values()), f"pf3blob{rank}"}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_output_contains_any_planted_secret(tmp_path: Path, monkeypatch) -> None:
    out_dir, json_path, text_path = tmp_path / "out", tmp_path / "report.json", tmp_path / "report.txt"
    html_path = tmp_path / "report.html"
    runs = spawn_env_ranks(WORLD, ["--json", str(json_path), "--text", str(text_path), "--out-dir", str(out_dir),
                                   "--html", str(html_path), "--skip", "probe"],
                           place=lambda rank: Placement(env=planted(rank)), timeout=180)
    assert json_path.exists(), {r: run.stderr[-2000:] for r, run in runs.items()}
    report = read_json(json_path)

    outputs = {f"rank {r} stdout+stderr": run.stdout + run.stderr for r, run in runs.items()}
    outputs["json"] = json_path.read_text()
    outputs["text"] = text_path.read_text()
    outputs["html"] = html_path.read_text()
    monkeypatch.setenv("COLUMNS", "200")
    rich = _Tty()
    terminal.render(json_report.load(str(json_path)), rich)
    outputs["rich terminal"] = rich.getvalue()
    rank_files = sorted(out_dir.rglob("*.json"))
    nonce = json.loads(json_path.read_text())["meta"]["run_nonce"]
    assert {p.name for p in rank_files} >= {f"rank-{r}.{nonce}.json" for r in range(WORLD)}
    for path in sorted(out_dir.rglob("*")):
        if path.is_file():
            outputs[str(path.relative_to(tmp_path))] = path.read_text()

    secrets = {value for rank in range(WORLD) for value in markers(rank)}
    for where, content in outputs.items():
        for secret in secrets:
            assert secret not in content, f"{secret!r} leaked into {where}"

    # The run did compare them: each secret drifts across ranks, shown only as <redacted #n>.
    drift = next(f for f in report["findings"] if f["check_id"] == "ENV004")
    for name in ("HF_TOKEN", "DATABASE_URL", "MY_DB_PASSWORD"):
        second, third = _rank_of(report, name, 2), _rank_of(report, name, 3)
        [first] = [r for r in range(WORLD) if r not in (second, third)]
        assert drift["data"]["variables"][name] == (  # one host: ranks tell the groups apart
            f"{name}: <redacted #1> on rank {first}, <redacted #2> on rank {second}, <redacted #3> on rank {third}")
    env_session = next(f for f in report["findings"] if f["check_id"] == "ENV003")  # NCCL_* is collective
    assert env_session["data"]["variable"] == "NCCL_IB_SESSION" and "<redacted #" in env_session["message"]

    # A weak secret cannot be brute-forced from what the report shows: the digest key is not
    # derivable from the run's public metadata (the old salt was run id, job id, master addr:port).
    meta = report["meta"]
    public_salt = f"{meta['run_id']}:{meta['job_id']}:{meta['master_addr']}:{meta['master_port']}"
    digests = {facts.rank: facts.env["MY_DB_PASSWORD"] for facts in _rank_facts(report)}
    for rank, tag in digests.items():
        assert tag.startswith("<redacted>:")
        guess = hmac.new(public_salt.encode(), f"hunter{rank}".encode(), hashlib.sha256).hexdigest()[:12]
        assert tag != f"<redacted>:{guess}"
    # The rank file holds what rank 1 published (channel/wire.py's two documents): read as rank 0 reads it.
    payload = from_wire((next(p for p in rank_files if p.name == f"rank-1.{nonce}.json")).read_bytes(),
                        SharedSections())
    assert payload.facts.env["HF_TOKEN"] == digests_of(report, "HF_TOKEN")[1]


def digests_of(report: dict, name: str) -> dict[int, str]:
    """rank -> the redacted tag of one variable in the report's rank facts."""
    return {facts.rank: facts.env[name] for facts in _rank_facts(report)}


def _rank_facts(report: dict) -> list[RankFacts]:
    """The ranks' facts of a report read as plain JSON (stored packed: preflight/model/rank_table.py)."""
    return unpack(from_builtins(report["rank_table"], RankTable))


def _rank_of(report: dict, name: str, number: int) -> int:
    """Which rank holds the secret numbered `number` (numbers follow the sorted digests)."""
    tags = digests_of(report, name)
    ordered = sorted(set(tags.values()))
    return next(rank for rank, tag in tags.items() if tag == ordered[number - 1])
