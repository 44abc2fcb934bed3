"""The cuBLAS / cuDNN / NCCL a process actually loaded, read from its maps and the library's own version call.

No CUDA library exists on CI machines: the test builds stand-ins with the real libraries' names
and version entry points (gcc), loads them into a fresh Python, and asks there, as preflight would:
the digest's key (probes/device/boundary.py) and the rank's versions (steps/gather/versions.py),
which SW001 compares across ranks.
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
CUDNN = "#include <stddef.h>\nsize_t cudnnGetVersion(void) { return 91002; }\n"  # CUDNN_VERSION of 9.10.2
PROBE = """
import ctypes, json, sys
sys.path.insert(0, {root!r})
for path in sys.argv[1:4]:
    ctypes.CDLL(path)  # as the dynamic loader would have, for torch
from preflight.lib import loaded_libraries
from preflight.model import RankFacts, World
from preflight.probes.device.boundary import TorchDevice
from preflight.steps.gather import GatherOptions, versions
from tests.helpers.fake_cuda import FakeCuda, gpu
found = loaded_libraries.loaded()
device = TorchDevice("cuda", 0, cuda=FakeCuda([gpu(0)]))
facts = RankFacts(rank=0, host="h", world=World("env", 0, 1))
versions.gather(facts, GatherOptions())
print(json.dumps({{"found": {{k: [v.path, v.version] for k, v in found.items()}},
                  "not_loaded": loaded_libraries.version_of("cublas", sys.argv[4]),
                  "key": device.digest_key()[0], "versions": facts.versions.known()}}))
"""


def _library(folder: Path, name: str, source: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    out = folder / name
    subprocess.run([require_tool("gcc"), "-shared", "-fPIC", "-o", str(out), str(folder / f"{name}.c")], check=True)
    return out


def test_the_loaded_cublas_cudnn_and_nccl_are_read_from_the_process_key_the_digest_and_the_versions(
        tmp_path: Path) -> None:
    cublas = _library(tmp_path, "libcublas.so.12", CUBLAS)
    nccl = _library(tmp_path, "libnccl.so.2", NCCL)
    cudnn = _library(tmp_path, "libcudnn.so.9", CUDNN)
    never = _library(tmp_path, "other/libcublas.so.11", CUBLAS) if (tmp_path / "other").mkdir() is None else None
    done = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT)), str(cublas), str(nccl), str(cudnn),
                           str(never)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["found"] == {"cublas": [str(cublas), "12.8.4"], "nccl": [str(nccl), "2.27.3"],
                             "cudnn": [str(cudnn), "9.10.2"]}
    assert seen["not_loaded"] == ""  # RTLD_NOLOAD: asking never loads a library the process had not
    # the loaded library's version, not the compile-time one (after torch's preferred BLAS backend)
    assert seen["key"].startswith("cuBLAS ") and seen["key"].endswith(" 12.8.4 sm_90 132 SMs")
    # the rank's versions, which SW001 compares across ranks and the reports show beside torch's
    assert {k: seen["versions"][k] for k in ("libnccl", "libcudnn", "libcublas")} == {
        "libnccl": "2.27.3", "libcudnn": "9.10.2", "libcublas": "12.8.4"}


def test_version_codes_are_decoded_as_each_library_encodes_them() -> None:
    from preflight.lib.loaded_libraries import cudnn_version, dotted

    assert (cudnn_version(91002), cudnn_version(90100), cudnn_version(8907)) == ("9.10.2", "9.1.0", "8.9.7")
    assert (dotted(22703), dotted(120804)) == ("2.27.3", "12.8.4")  # NCCL_VERSION_CODE, CUBLASLT_VERSION


def test_a_process_without_them_reads_none(tmp_path: Path) -> None:
    """A process that mapped none of them (a CPU torch, a static build): nothing is found, never a guess;
    a library mapped but gone or unable to say keeps its path and an empty version."""
    from preflight.lib.loaded_libraries import loaded

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
                    "7f02-7f03 r-xp 00000000 00:00 0 [vdso]\n")
    assert loaded(str(maps)) == {}
    maps.write_text(f"7f00-7f01 r-xp 00000000 08:01 1 {tmp_path}/gone/libnccl.so.2\n")
    assert {k: v.version for k, v in loaded(str(maps)).items()} == {"nccl": ""}


def test_a_host_whose_loaded_nccl_differs_is_named_by_sw001_in_a_real_run(tmp_path: Path) -> None:
    """3 real ranks on 3 fake hosts (real UTS and mount namespaces, tests/helpers/hosts.py), each with the same
    LD_PRELOAD path, as one job script gives: the file there is each host's own (a bind mount), and pfl-c's is
    an older NCCL, as a host whose image differs. SW001 names pfl-c with both versions, an error (the probes
    would hang on mismatched NCCL), and rank 0's report shows the NCCL it loaded."""
    from tests.checks.test_config_multirank import only, run_ok
    from tests.helpers.hosts import fake_host
    from tests.helpers.ranks import Placement, spawn_env_ranks

    view = tmp_path / "lib"
    view.mkdir()
    place = {}
    for rank, (host, code) in enumerate((("pfl-a", 22703), ("pfl-b", 22703), ("pfl-c", 22105))):
        own = tmp_path / f"lib-{host}"
        own.mkdir()
        _library(own, "libnccl.so.2", NCCL.replace("22703", str(code)))
        place[rank] = Placement(fake_host(tmp_path, host, hosts={"pfl-master": "127.0.0.1"}, binds={own: view}))
    out = tmp_path / "report.json"
    runs = spawn_env_ranks(3, ["--skip", "probe", "--skip", "network", "--json", str(out), "--timeout", "120"],
                           place=place, master_addr="pfl-master", timeout=240,
                           common_env={"LD_PRELOAD": str(view / "libnccl.so.2")})
    report = run_ok(runs, out)
    finding = only(report, "SW001")
    assert (finding["severity"], finding["hosts"], finding["ranks"]) == ("error", ["pfl-c"], [2]), finding
    assert finding["message"] == "libnccl version differs: `2.27.3` on 2 hosts, `2.21.5` on pfl-c"
    assert report["exit_code"] == 3
    assert report["meta"]["versions"]["libnccl"] == "2.27.3"
