"""The history's tables (SQLAlchemy Core), one schema for SQLite and PostgreSQL, and its version.

Versioning is one integer in `preflight_meta` (key `schema_version`) and an ordered list of
migration steps (MIGRATIONS[v] takes version v to v+1), applied in the same transaction that
checks the version. Alembic would bring a migrations folder, an env.py and a second version
table into a tool that users embed in their jobs and point at a shared file; one integer and
plain steps are all this needs while the schema is small, and the rule that matters is kept
either way: a database of a newer schema than this preflight knows is refused (one line),
never written to or "downgraded".
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

SCHEMA_VERSION = 1
metadata = MetaData()

meta = Table(
    "preflight_meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

# One row per preflight run rank 0 finished.
runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(256), nullable=False),
    Column("job_id", String(256), nullable=False, default=""),
    Column("launcher", String(64), nullable=False, default=""),
    Column("started_at", Float, nullable=False),  # seconds since the epoch, UTC
    Column("finished_at", Float, nullable=False),
    Column("world_size", Integer, nullable=False),
    Column("num_nodes", Integer, nullable=False),
    Column("mesh", String(256), nullable=False, default=""),
    Column("backend", String(16), nullable=False, default=""),
    Column("verdict", String(64), nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("version", String(64), nullable=False, default=""),  # preflight's
    Column("command_line", Text, nullable=False, default=""),
)

# Every host of a run; `failed`: the run named it bad (the verdict's exclude list).
run_hosts = Table(
    "run_hosts", metadata,
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("host", String(256), nullable=False),
    Column("ranks", Text, nullable=False, default=""),  # comma list
    Column("failed", Boolean, nullable=False, default=False),
    Index("ix_run_hosts_host_run", "host", "run_pk"),
    Index("ix_run_hosts_run", "run_pk"),
)

# Every GPU of a run by UUID (and serial where NVML gave one): a GPU moved to another host keeps its record.
run_gpus = Table(
    "run_gpus", metadata,
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("host", String(256), nullable=False),
    Column("gpu_index", Integer, nullable=False),
    Column("uuid", String(128), nullable=False, default=""),
    Column("serial", String(128), nullable=False, default=""),
    Column("name", String(256), nullable=False, default=""),
    Column("pci_bus_id", String(64), nullable=False, default=""),
    Index("ix_run_gpus_uuid_run", "uuid", "run_pk"),
    Index("ix_run_gpus_run", "run_pk"),
)

findings = Table(
    "findings", metadata,
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("check_id", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("hosts", Text, nullable=False, default=""),  # comma list
    Column("ranks", Text, nullable=False, default=""),
    Index("ix_findings_run", "run_pk"),
    Index("ix_findings_check", "check_id", "run_pk"),
)

# Every measured figure, one row per subject (a host, or a GPU by UUID) it describes. `kind`
# says what was measured: "collective" rows carry dim/op/size/group; the device probes (GPU
# memory bandwidth, GEMM rate, ...) add their own kinds with `gpu_uuid` set and `dim`/`op`
# naming their variant, without a schema change (history/figures.py, `FigureRow`).
figures = Table(
    "figures", metadata,
    Column("run_pk", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("subject", String(256), nullable=False),  # the host, or the GPU's UUID
    Column("host", String(256), nullable=False, default=""),
    Column("gpu_uuid", String(128), nullable=False, default=""),
    Column("dim", String(64), nullable=False, default=""),
    Column("op", String(64), nullable=False, default=""),
    Column("group_index", Integer, nullable=False, default=-1),
    Column("group_size", Integer, nullable=False, default=0),
    Column("group_hosts", Integer, nullable=False, default=0),  # hosts the group spans: 1 = intra-host path
    Column("size_bytes", BigInteger, nullable=False, default=0),
    Column("value", Float, nullable=False),
    Column("unit", String(16), nullable=False),  # GB/s for collectives' busbw
    Index("ix_figures_subject_run", "subject", "run_pk"),
    Index("ix_figures_run", "run_pk"),
)

TABLES = (runs, run_hosts, run_gpus, findings, figures)

# MIGRATIONS[v]: from schema v to v + 1, inside the version check's transaction. None yet.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}
