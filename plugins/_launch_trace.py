"""Replay a KernelLib launch sequence with new pointers, traced once per buffer layout.

A TensorRT plugin's JIT ``impl`` runs on every enqueue, and building KernelLib's arguments there
(buffer views, plans, dtype codes, strides) costs more host time than a short decode takes on
the GPU. Those arguments depend only on the buffers' shapes and strides and the op's attributes;
only the pointers and the stream change from call to call. So :func:`trace` runs the sequence
once against a copy of the KernelLib whose ctypes library records each foreign call instead of
making it, with every pointer and the stream replaced by a distinct sentinel value; the
:class:`Launch` it returns keeps the ctypes functions, their recorded arguments (converted to
ctypes instances once) and the positions of each sentinel, and calling it puts this call's
values there and makes the same foreign calls. KernelLib stays the one place that knows the
launch functions' arguments.
"""

from __future__ import annotations

import copy

from onnx_fuse.plugins.kernel_lib import KernelLib

__all__ = ["Launch", "TracedBuffer", "slot", "trace"]

# Sentinels: far above any size, stride or byte count the launch functions take, and spaced so
# that a pointer with an offset added would not pass for one (trace refuses it).
_SLOT_BASE = 0x7A5E_0000_0000
_SLOT_STEP = 1 << 24
_MAX_SLOTS = 64


def slot(i: int) -> int:
    """The sentinel standing for value ``i`` of a :class:`Launch` call while tracing."""
    return _SLOT_BASE + i * _SLOT_STEP


class TracedBuffer:
    """A buffer as TensorRT hands it to a plugin (``data_ptr``, ``shape``, element ``strides``)
    with the sentinel pointer of its slot."""

    __slots__ = ("data_ptr", "shape", "strides")

    def __init__(self, i: int, shape, strides):
        self.data_ptr, self.shape, self.strides = slot(i), shape, strides


class _RecordingLibrary:
    """Stands in for KernelLib's ctypes library during a trace: records (function, name,
    arguments) and answers 0 (success) without calling anything."""

    def __init__(self, cdll):
        self._cdll = cdll
        self.calls = []

    def __getattr__(self, name):
        fn = getattr(self._cdll, name)

        def record(*args):
            self.calls.append((fn, name, args))
            return 0
        return record


class Launch:
    """The foreign calls of one traced sequence; ``launch(values)`` makes them with ``values[i]``
    where slot ``i`` was, raising KernelError (as KernelLib does) at the first failing call.
    ``result`` is what the traced sequence returned."""

    __slots__ = ("calls", "result")

    def __init__(self, calls, result):
        self.calls, self.result = calls, result

    def __call__(self, values) -> None:
        for fn, name, args, subs in self.calls:
            a = list(args)
            for pos, i in subs:
                a[pos] = values[i]
            rc = fn(*a)
            if rc:
                KernelLib._check(rc, name)


def trace(lib: KernelLib, sequence, n_slots: int) -> Launch:
    """Run ``sequence(traced_lib)``, which must pass ``slot(i)`` (i < n_slots) wherever a call
    needs value i, and return its calls as a :class:`Launch`. An exception of ``sequence``
    propagates, and nothing was launched."""
    rec = _RecordingLibrary(lib._lib)
    traced = copy.copy(lib)
    traced._lib = rec
    result = sequence(traced)
    calls = []
    for fn, name, args in rec.calls:
        subs = []
        for pos, a in enumerate(args):
            if type(a) is int and _SLOT_BASE <= a < _SLOT_BASE + _MAX_SLOTS * _SLOT_STEP:
                i, off = divmod(a - _SLOT_BASE, _SLOT_STEP)
                if off or i >= n_slots:
                    raise AssertionError(f"{name} argument {pos} is derived from traced slot "
                                         f"{i} (offset {off}): it cannot be replayed")
                subs.append((pos, i))
        # The other arguments as the ctypes instances of the function's argtypes, converted
        # once: ctypes then passes them without converting them again on every call.
        slots = {pos for pos, _ in subs}
        types = fn.argtypes
        args = tuple(a if pos in slots else types[pos](a) for pos, a in enumerate(args))
        calls.append((fn, name, args, tuple(subs)))
    return Launch(tuple(calls), result)
