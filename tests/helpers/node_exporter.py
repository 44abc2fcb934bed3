"""A real Prometheus node_exporter reading only a textfile folder, on loopback at a free port.

Debian's `prometheus-node-exporter`, started by the test with every default collector off and
`--collector.textfile.directory` on the given folder, as a GPU cluster runs it; `scrape()`
GETs /metrics over HTTP. Without the package: skip with the apt line, fail under CI=true.

    def test_something(node_exporter):
        exporter = node_exporter(folder)      # then write folder/x.prom and exporter.scrape()
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.ranks import free_port
from tests.helpers.tools import require_tool


class NodeExporter:
    """One node_exporter process; `scrape()` returns its /metrics text."""

    def __init__(self, folder: Path) -> None:
        binary = require_tool("prometheus-node-exporter")
        self.port = free_port()
        self.proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{self.port}",
                                      "--collector.disable-defaults", "--collector.textfile",
                                      f"--collector.textfile.directory={folder}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.scrape()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    why = self.proc.stderr.read() if self.proc.stderr else ""
                    raise RuntimeError(f"node_exporter did not start: {why}") from None
                time.sleep(0.1)

    def scrape(self) -> str:
        """GET /metrics over HTTP on loopback."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            return response.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def node_exporter() -> Iterator[Callable[[Path], NodeExporter]]:
    """A factory `node_exporter(folder) -> NodeExporter`; every one started is stopped afterwards."""
    started: list[NodeExporter] = []

    def start(folder: Path) -> NodeExporter:
        exporter = NodeExporter(folder)
        started.append(exporter)
        return exporter

    try:
        yield start
    finally:
        for exporter in started:
            exporter.stop()
