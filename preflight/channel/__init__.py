"""The rank-to-rank channel: the run's c10d store, its keys, its typed messages, and liveness.

Everything that crosses the store goes through this package: the steps (preflight/steps/) and
the probes (preflight/probes/) sit on top of it and never touch a store themselves
(tests/test_architecture.py). The parts:

- keys.py       the one table: every key family of a run a typed row (pattern, message type,
                writer, reader); code names a key by its row
- board.py      the one typed access to a store: put / read / wait / count / fetch, by a row's
                key, each value its row's model type through the one codec (model/codec.py); a
                value that does not decode is a `BadValue` naming the rank it came from, never an
                exception
- liveness.py   is that rank alive? the one owner: every rank's beat, rank 0's beat, and the
                look at them
- store_join.py joining the store without hanging; the owner mark
- roster.py     rank claims
- exchange.py   step 4 and the go / verdict hand-offs (payloads: wire.py, collected.py;
                the --out-dir side: rank_files.py; the run secret: run_auth.py)
"""
