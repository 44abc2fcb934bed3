"""The cuBLAS / NCCL a process actually loaded, read from its maps and the library's own version call.

No CUDA library exists on CI machines: the test builds two stand-ins with the real libraries' names
and version entry points (gcc), loads them into a fresh Python, and asks there, as preflight would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
CUBLAS = "int cublasGetProperty(int kind, int *value) { *value = kind == 0 ? 12 : kind == 1 ? 8 : 4; return 0; }\n"
NCCL = "int ncclGetVersion(int *version) { *version = 22703; return 0; }\n"
PROBE = """
import ctypes, json, sys
sys.path.insert(0, {root!r})
for path in sys.argv[1:3]:
    ctypes.CDLL(path)  # as the dynamic loader would have, for torch
from preflight.lib import loaded_libraries
from preflight.probes.device.boundary import TorchDevice
from tests.helpers.fake_cuda import FakeCuda, gpu
found = loaded_libraries.loaded()
device = TorchDevice("cuda", 0, cuda=FakeCuda([gpu(0)]))
print(json.dumps({{"found": {{k: [v.path, v.version] for k, v in found.items()}},
                  "not_loaded": loaded_libraries.version_of("cublas", sys.argv[3]),
                  "key": device.digest_key()[0]}}))
"""


def _library(folder: Path, name: str, source: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    out = folder / name
    subprocess.run([require_tool("gcc"), "-shared", "-fPIC", "-o", str(out), str(folder / f"{name}.c")], check=True)
    return out


def test_the_loaded_cublas_and_nccl_are_read_from_the_process_and_key_the_digest(tmp_path: Path) -> None:
    cublas = _library(tmp_path, "libcublas.so.12", CUBLAS)
    nccl = _library(tmp_path, "libnccl.so.2", NCCL)
    never = _library(tmp_path, "other/libcublas.so.11", CUBLAS) if (tmp_path / "other").mkdir() is None else None
    done = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT)), str(cublas), str(nccl), str(never)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["found"] == {"cublas": [str(cublas), "12.8.4"], "nccl": [str(nccl), "2.27.3"]}
    assert seen["not_loaded"] == ""  # RTLD_NOLOAD: asking never loads a library the process had not
    # the loaded library's version, not the compile-time one (after torch's preferred BLAS backend)
    assert seen["key"].startswith("cuBLAS ") and seen["key"].endswith(" 12.8.4 sm_90 132 SMs")
