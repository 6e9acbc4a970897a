"""kiln.compile and kiln.load: the model kinds and compile options, normalized for the
extension (kiln._kiln)."""
import errno
import os

from . import _kiln

_KIR_STARTS = ("func", "symbol", "device", "weight", "//")


def _strings(value, what):
    """None, one string, or an iterable of strings (ints allowed for donations)."""
    if value is None:
        return []
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise TypeError(f"{what}: expected strings, got {type(v).__name__}")
        out.append(str(v))
    return out


def _place(place):
    if isinstance(place, dict):
        return [f"{pattern}={device}" for pattern, device in place.items()]
    return _strings(place, "place")


def _partition(partition):
    if partition is None:
        return None
    if isinstance(partition, int) and not isinstance(partition, bool):
        return f"pipeline:{partition}"
    if isinstance(partition, str):
        return partition
    raise TypeError(f"partition: expected 'pipeline:N', 'tensor:T' or an int, got "
                    f"{type(partition).__name__}")


def _symbols(symbols):
    """{'seq': 2048} or {'seq': (1, 2048)} -> {'seq': (lo, hi)}."""
    out = {}
    for name, r in (symbols or {}).items():
        if isinstance(r, int) and not isinstance(r, bool):
            r = (1, r)
        try:
            lo, hi = (int(x) for x in r)
        except (TypeError, ValueError):
            raise TypeError(f"symbols: '{name}' needs an upper bound or a (lo, hi) pair, "
                            f"got {r!r}") from None
        if lo > hi:
            raise ValueError(f"symbols: '{name}' has an empty range [{lo}, {hi}]")
        out[str(name)] = (lo, hi)
    return out


def _is_kir_text(s):
    return "\n" in s or s.lstrip().startswith(_KIR_STARTS)


def compile(model, devices=None, target=None, donate=(), place=(), partition=None,
            symbols=None):
    """Compiles ``model`` into a :class:`kiln.Module`.

    model: a path (``.onnx``, ``.kir``; str or os.PathLike), ``.kir`` text, an
        ``onnx.ModelProto`` or serialized ONNX bytes.
    devices: the devices to run on (``"cpu[0]"``, ``["ref[0]", "ref[1]"]``, ``"auto"``);
        default: :func:`kiln.default_device`.
    target: codegen target(s), such as ``"cpu:x86-64-v3"``.
    donate: arguments whose storage receives a result, ``"[@FUNC:]ARG[:RESULT]"`` or an
        argument index (docs/donation.md); the caller's array is updated in place.
    place: ``{"PATTERN": "DEVICE"}`` or ``["PATTERN=DEVICE"]``: pin ops to devices.
    partition: ``"pipeline:N"`` or N: split the graph into N stages over the devices;
        ``"tensor:T"``: run every op over groups of T devices (tensor parallelism, weights
        split by columns or rows); ``"pipeline:P,tensor:T"``: both, over P*T devices.
    symbols: ranges of an ONNX model's dynamic dims, ``{"seq": 2048}`` (1..2048) or
        ``{"seq": (1, 2048)}``; default 1..65536.

    Compiling releases the GIL. Raises kiln.Error with the diagnostics on failure.
    """
    options = dict(devices=_strings(devices, "devices"), targets=_strings(target, "target"),
                   donate=_strings(donate, "donate"), place=_place(place),
                   partition=_partition(partition))
    ranges = _symbols(symbols)
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return _kiln._compile_onnx(model.SerializeToString(), "<onnx.ModelProto>", "", ranges,
                                   **options)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _kiln._compile_onnx(bytes(model), "<onnx bytes>", "", ranges, **options)
    if isinstance(model, str) and _is_kir_text(model):
        _no_symbols(ranges)
        return _kiln._compile_text(model, "<kir text>", **options)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "no such model file", path)
        if path.endswith(".kmod"):
            raise ValueError(f"{path} is a compiled module: load it with kiln.load")
        if path.endswith(".onnx"):
            with open(path, "rb") as f:
                data = f.read()
            return _kiln._compile_onnx(data, path, os.path.dirname(os.path.abspath(path)),
                                       ranges, **options)
        _no_symbols(ranges)
        return _kiln._compile_file(path, **options)
    raise TypeError("model must be a path, .kir text, an onnx.ModelProto or ONNX bytes; got "
                    f"{type(model).__name__}")


def _no_symbols(ranges):
    if ranges:
        raise ValueError("symbols= sets the ranges of an ONNX model's dynamic dims; a .kir "
                         "model declares its own (symbol seq in [1, 4096])")


def load(path, device=None):
    """Loads a ``.kmod`` module file (written by :meth:`Module.save` or ``kiln compile``).
    ``device`` runs every device of the module on that one instead (``"ref[0]"``)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "no such module file", path)
    return _kiln._load(path, device)
