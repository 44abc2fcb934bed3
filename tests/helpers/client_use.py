"""Which thread uses which c10d store client, checked as it happens inside a rank (a plant installs it).

A c10d client serializes its calls under one lock, and a blocking call (torch's group creation
waiting in the store for a rank that never comes) holds it for as long as it waits: another
thread's call on that client then waits inside C++, where no signal handler runs (issue 47).
`install()` wraps the Python-level calls on every store (`set`, `get`, `check`, `multi_get`,
...; a PrefixStore is traced to the client under it) and torch's group creation
(`init_process_group`, `new_group`, `init_device_mesh`: blocking uses of the client they form
on). A call on a client while another thread is inside a blocking use of that same client
prints one line, `CLIENT-SHARED: ...`, before the call is made (it may never return). Torch's
own C++ calls are not seen, only where they begin; preflight's calls are all Python-level.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

SHARED = "CLIENT-SHARED"
CALLS = ("set", "get", "add", "check", "compare_set", "multi_get", "multi_set", "append", "wait", "delete_key",
         "num_keys")

_blocking: dict[str, list[tuple[int, str, str]]] = {}  # client -> (thread id, its name, what) of each use inside it
_lock = threading.Lock()


def client_of(store: Any) -> str:
    """The client under a chain of PrefixStores, named by its connection (a TCPStore's repr names its
    socket's fd and local port: one per connection, whichever Python object wraps it)."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return repr(store) if "TCPClient" in repr(store) else f"{type(store).__name__} at {id(store):#x}"


def _say_if_shared(client: str, doing: str) -> None:
    me = threading.get_ident()
    with _lock:
        others = [(name, what) for who, name, what in _blocking.get(client, []) if who != me]
    if others:
        print(f"{SHARED}: thread {threading.current_thread().name!r} calls {doing} on a client that thread "
              f"{others[0][0]!r} blocks in ({others[0][1]}): {client}", file=sys.stderr, flush=True)


def _traced_call(cls: type, name: str) -> None:
    real = getattr(cls, name)

    @functools.wraps(real)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        _say_if_shared(client_of(self), f"{cls.__name__}.{name}")
        return real(self, *args, **kwargs)

    setattr(cls, name, call)


def _blocking_use(module: Any, name: str, store_of: Callable[[tuple, dict], Any]) -> None:
    real = getattr(module, name)

    @functools.wraps(real)
    def use(*args: Any, **kwargs: Any) -> Any:
        client = client_of(store_of(args, kwargs))
        me = (threading.get_ident(), threading.current_thread().name, name)
        _say_if_shared(client, name)
        with _lock:
            _blocking.setdefault(client, []).append(me)
        try:
            return real(*args, **kwargs)
        finally:
            with _lock:
                _blocking[client].remove(me)

    setattr(module, name, use)


def install() -> None:
    """Trace every store call and torch's group creation in this process from now on."""
    import torch.distributed as dist
    import torch.distributed.device_mesh as device_mesh
    from torch.distributed import distributed_c10d

    for cls in (dist.PrefixStore, dist.TCPStore):
        for name in CALLS:
            _traced_call(cls, name)

    def default_store(args: tuple, kwargs: dict) -> Any:
        return distributed_c10d._get_default_store()

    _blocking_use(dist, "init_process_group", lambda args, kwargs: kwargs["store"])
    _blocking_use(dist, "new_group", default_store)
    _blocking_use(device_mesh, "init_device_mesh", default_store)
