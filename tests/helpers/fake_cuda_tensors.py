"""CUDA tensors of the CUDA model (tests/helpers/fake_cuda.py), held on the CPU, every allocation counted.

A tensor "on" GPU k is an `OnDevice` tensor (a torch.Tensor subclass) whose storage the `Ledger`
counts against GPU k's memory. As on CUDA, every operation on CUDA tensors makes its results on
their device: `OnDevice.__torch_function__` sees each call (torch.cat, repeat, a comparison, a
product, a copy, in any thread: a subclass's hook is no thread-local mode), runs it on the CPU, and
counts each result whose storage is new (a view or an in-place result shares a counted storage:
nothing more). A storage is given back when torch frees it (storages keep one Python object while
they live, so a finalizer on it runs only when the last view is gone), to the caching allocator
(`FakeCuda.release`: reserved memory stays reserved until empty_cache). Tensors of two devices in
one operation raise as CUDA does; a copy between them is a copy. Products and copies queue their
time on the device's stream (`FakeCuda.kernel`).

What is deliberately not modelled: `.device` still says "cpu" (the values live there), and a CPU
tensor mixed into an operation on CUDA tensors is accepted.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import torch

MATMULS = ("matmul", "__matmul__", "mm")


def _flat(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flat(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flat(item)
    else:
        yield value


def is_cuda(device: Any) -> bool:
    """Whether a device argument names a CUDA device (a bare "cuda" too)."""
    if device is None or isinstance(device, torch.dtype):
        return False
    try:
        return torch.device(device).type == "cuda"
    except (RuntimeError, TypeError):
        return False


class Ledger:
    """Which device each CUDA storage is on, keyed by the storage's Python object (one per live storage)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.where: dict[int, int] = {}

    def device_of(self, tensor: Any) -> int | None:
        """The device of a tensor's storage; None for a host tensor."""
        with torch._C.DisableTorchFunctionSubclass():
            return self.where.get(id(tensor.untyped_storage()))

    def hold(self, tensor: Any, device: Any) -> int:
        """Count the tensor's storage on `device` (an ordinal, "cuda:N", or a bare "cuda": the thread's current
        device) unless it is counted already; its device. CUDA's out-of-memory error beyond free memory."""
        with torch._C.DisableTorchFunctionSubclass():
            storage = tensor.untyped_storage()
            key, nbytes = id(storage), int(storage.nbytes())
        if key in self.where:
            return self.where[key]
        index = self.model.allocate(device, nbytes)
        self.where[key] = index
        weakref.finalize(storage, self._free, key, index, nbytes)
        return index

    def _free(self, key: int, index: int, nbytes: int) -> None:
        self.where.pop(key, None)
        self.model.release(index, nbytes)


def device_tensor_class(model: Any, ledger: Ledger, ordinal: Any) -> type:
    """The OnDevice class of one installed model (`ordinal`: fake_cuda._ordinal, a device argument's index)."""

    class OnDevice(torch.Tensor):
        """A CUDA tensor of the model (see the module's docstring)."""

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            with torch._C.DisableTorchFunctionSubclass():
                return _operation(func, args, kwargs or {})

    def held(tensor: Any, device: Any) -> Any:
        """`tensor` (a host tensor) as a CUDA tensor on `device`, its storage counted there."""
        ledger.hold(tensor, device)
        with torch._C.DisableTorchFunctionSubclass():
            return tensor.as_subclass(OnDevice)

    def wrap(value: Any, index: int | None) -> Any:
        if isinstance(value, OnDevice) or index is None:
            return value  # an in-place result (the tensor itself), or nothing on a device
        if isinstance(value, torch.Tensor):
            return held(value, index)  # a new storage counted; a view's is counted already
        if type(value) in (list, tuple) and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(wrap(v, index) for v in value)
        return value

    def _operation(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        name = getattr(func, "__name__", "")
        if name == "to":
            return _moved(args[0], list(args[1:]), dict(kwargs))
        if name == "copy_":
            return _copied(func, args, kwargs)
        devices = {ledger.device_of(t) for t in _flat((args, kwargs)) if isinstance(t, OnDevice)} - {None}
        if len(devices) > 1:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"cuda:{min(devices)} and cuda:{max(devices)}!")
        index = devices.pop() if devices else None
        if name in MATMULS and index is not None:
            a, b = args[0], args[1]
            model.blas_workspace(index)
            model.kernel(index, "gemm", 2.0 * a.shape[0] * a.shape[1] * b.shape[-1])
            if a.dtype in (torch.float16, torch.bfloat16) and a.dim() == 2 and b.dim() == 2:
                # A half-precision product's values are never looked at (only its time, the model's): not
                # computed, since the CPU holding the "GPU" tensors takes ~50 ms per 256^3 fp16 product.
                return held(torch.empty(a.shape[0], b.shape[1], dtype=a.dtype), index)
        return wrap(func(*args, **kwargs), index)

    def _moved(source: Any, rest: list[Any], kwargs: dict[str, Any]) -> Any:
        """Tensor.to of a CUDA tensor: to the host a fresh host tensor (a copy), to another device a copy counted
        there, a dtype change a new tensor on the same device, no change the tensor itself."""
        target = kwargs.pop("device", None)
        if rest and isinstance(rest[0], (str, torch.device, int)):
            target = rest.pop(0)
        mine = ledger.device_of(source)
        plain = source.as_subclass(torch.Tensor)
        if target is not None and not is_cuda(target):
            if mine is not None:
                model.kernel(mine, "host", plain.numel() * plain.element_size())
            return plain.to(*rest, **kwargs, copy=True)
        index = mine if target is None else ordinal(target)
        index = model.current_device() if index is None else index
        out = plain.to(*rest, **kwargs)
        if index == mine and out.untyped_storage().data_ptr() == plain.untyped_storage().data_ptr():
            return source  # nothing to do: torch returns the tensor itself
        if index != mine:
            model.kernel(index, "copy", 2 * out.numel() * out.element_size())
            out = out.clone() if out.untyped_storage().data_ptr() == plain.untyped_storage().data_ptr() else out
        return held(out, index)

    def _copied(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """dst.copy_(src): in place; its time on the destination's device (or the source's, to the host)."""
        dst, src = args[0], args[1]
        mine = ledger.device_of(dst) if isinstance(dst, OnDevice) else None
        theirs = ledger.device_of(src) if isinstance(src, OnDevice) else None
        func(*args, **kwargs)
        if mine is not None or theirs is not None:
            both = mine is not None and theirs is not None
            model.kernel(mine if mine is not None else theirs, "copy" if both else "host",
                         (2 if both else 1) * dst.numel() * dst.element_size())
        return dst

    OnDevice.held = staticmethod(held)  # type: ignore[attr-defined]
    return OnDevice
