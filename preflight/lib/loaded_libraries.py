"""The cuBLAS, cuDNN and NCCL this process actually runs: the mapped library and its own version call.

torch's compile-time CUDA version says which toolkit torch was built against, not which libcublas
the dynamic loader found (the pip wheel's nvidia-cublas, a conda package, an LD_LIBRARY_PATH
entry, a container's /usr/local/cuda). Two nodes with different cuBLAS builds may give different
bits for one product, and that is no corruption. So the libraries are read from the process:
the files mapped into it (/proc/self/maps), each asked for its version through its own API, with
RTLD_NOLOAD (a library not loaded yet is never loaded by asking).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable

from msgspec import Struct

# library -> (file name pattern, the version call)
_NAMES = {
    "cublas": re.compile(r"libcublas\.so[.0-9]*$"),
    "cublasLt": re.compile(r"libcublasLt\.so[.0-9]*$"),
    "cudnn": re.compile(r"libcudnn\.so[.0-9]*$"),
    "nccl": re.compile(r"libnccl\.so[.0-9]*$"),
}


class Loaded(Struct, frozen=True):
    """One library in this process: its mapped file and the version it reports ("" when it would not say)."""

    name: str
    path: str
    version: str


def mapped_files(maps: str = "/proc/self/maps") -> list[str]:
    """The files mapped into this process, in first-mapped order (empty where /proc is not there)."""
    seen: dict[str, None] = {}
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    seen.setdefault(parts[5].strip(), None)
    except OSError:
        return []
    return list(seen)


def _cublas(lib: ctypes.CDLL) -> str:
    parts = []
    for kind in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL (libraryPropertyType)
        value = ctypes.c_int(-1)
        if lib.cublasGetProperty(kind, ctypes.byref(value)) != 0:
            return ""
        parts.append(str(value.value))
    return ".".join(parts)


def dotted(code: int, minor_digits: int = 2) -> str:
    """A version code as major.minor.patch: major * 10**(minor_digits + 2) + minor * 100 + patch."""
    scale = 10 ** (minor_digits + 2)
    return f"{code // scale}.{code % scale // 100}.{code % 100}"


def cudnn_version(code: int) -> str:
    """cudnnGetVersion's CUDNN_VERSION as major.minor.patch: cuDNN 9 and later encode it as
    major * 10000 + minor * 100 + patch (9.10.2 is 91002), cuDNN 8 and earlier as major * 1000 +
    minor * 100 + patch (8.9.7 is 8907)."""
    return dotted(code) if code >= 90000 else dotted(code, minor_digits=1)


def _size_t_call(symbol: str, decode: Callable[[int], str]) -> Callable[[ctypes.CDLL], str]:
    def call(lib: ctypes.CDLL) -> str:
        function = getattr(lib, symbol)
        function.restype = ctypes.c_size_t
        return decode(int(function()))
    return call


def _nccl(lib: ctypes.CDLL) -> str:
    value = ctypes.c_int(-1)
    if lib.ncclGetVersion(ctypes.byref(value)) != 0:
        return ""
    return dotted(value.value)  # NCCL_VERSION_CODE: major*10000 + minor*100 + patch (2.9 and later)


_VERSION_CALLS: dict[str, Callable[[ctypes.CDLL], str]] = {
    "cublas": _cublas,
    "cublasLt": _size_t_call("cublasLtGetVersion", dotted),  # CUBLASLT_VERSION: major*10000 + minor*100 + patch
    "cudnn": _size_t_call("cudnnGetVersion", cudnn_version), "nccl": _nccl,
}


def version_of(name: str, path: str) -> str:
    """The version the already-loaded library at `path` reports ("" when it is not loaded or will not say)."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return ""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        return _VERSION_CALLS[name](lib)
    return ""


def loaded(maps: str = "/proc/self/maps") -> dict[str, Loaded]:
    """cuBLAS, cuBLASLt, cuDNN and NCCL as this process has them loaded (absent: not loaded)."""
    found: dict[str, Loaded] = {}
    for path in mapped_files(maps):
        base = os.path.basename(path)
        for name, pattern in _NAMES.items():
            if name not in found and pattern.match(base):
                found[name] = Loaded(name, path, version_of(name, path))
    return found
