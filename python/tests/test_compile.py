"""kiln.compile for every model kind and option, Module.save / kiln.load, and what a module
tells about itself (functions, signature, symbols, reports, peak memory, devices)."""
import os
import pathlib

import numpy as np
import pytest

from conftest import ADD_KIR, EMBED_KIR, SOURCE_ROOT

X = np.array([-2.0, -0.25, 0.0, 1.5], dtype=np.float32)
WANT_Y = np.maximum(X * 2 + 1, 0)


def check_embed(m):
    y, s = m(X)
    np.testing.assert_array_equal(y, WANT_Y)
    assert s.shape == () and s == WANT_Y.sum()


def onnx_add_model():
    import onnx
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add0")],
                              "add", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_kir_path_str_and_pathlib(kiln):
    check_embed(kiln.compile(EMBED_KIR))
    check_embed(kiln.compile(pathlib.Path(EMBED_KIR)))


def test_kir_text(kiln):
    check_embed(kiln.compile(open(EMBED_KIR).read()))


def test_onnx_proto_bytes_and_file(kiln, tmp_path):
    model = onnx_add_model()
    a = np.arange(5, dtype=np.float32)
    b = np.full(5, 0.5, dtype=np.float32)
    path = tmp_path / "add.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (model, model.SerializeToString(), bytearray(model.SerializeToString()),
                   str(path), path):
        m = kiln.compile(source)
        np.testing.assert_array_equal(m(a, b), a + b)
    sig = kiln.compile(model).signature
    assert [t.name for t in sig.args] == ["a", "b"]
    assert sig.args[0].shape == ("n",)


def test_onnx_symbols_option_sets_ranges(kiln):
    m = kiln.compile(onnx_add_model(), symbols={"n": 16})
    assert m.symbols == {"n": (1, 16)}
    m = kiln.compile(onnx_add_model(), symbols={"n": (2, 8)})
    assert m.symbols == {"n": (2, 8)}
    with pytest.raises(ValueError, match="symbol 'n' to 9, outside its range"):
        m(np.zeros(9, np.float32), np.zeros(9, np.float32))


def test_existing_onnx_export_from_examples(kiln):
    d = os.path.join(SOURCE_ROOT, "examples", "onnx", "llama")
    m = kiln.compile(os.path.join(d, "model.onnx"))
    for t in (1, 5):
        got = m(np.load(os.path.join(d, f"ids_{t}.npy")))
        np.testing.assert_allclose(got, np.load(os.path.join(d, f"logits_{t}.npy")),
                                   rtol=1e-3, atol=1e-4)


def test_devices_option(kiln):
    for devices in ("ref[0]", ["ref[0]"], ["cpu[0]"]):
        m = kiln.compile(ADD_KIR, devices=devices)
        assert m.devices == ([devices] if isinstance(devices, str) else devices)
        np.testing.assert_array_equal(m(np.ones(4, np.float32), np.ones(4, np.float32)),
                                      np.full(4, 2, np.float32))


CHAIN_KIR = """
func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
  %a = tanh %x : tensor<4x8xf32>
  %b = exp %a : tensor<4x8xf32>
  %c = tanh %b : tensor<4x8xf32>
  %d = exp %c : tensor<4x8xf32>
  return %d
}
"""


def test_partition_and_place_over_two_devices(kiln):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    one = kiln.compile(CHAIN_KIR, devices="ref[0]")
    for two in (kiln.compile(CHAIN_KIR, devices=["ref[0]", "ref[1]"], partition=2),
                kiln.compile(CHAIN_KIR, devices=["ref[0]", "ref[1]"], partition="pipeline:2")):
        assert two.devices == ["ref[0]", "ref[1]"]
        report = two.report("placement")
        assert "ref[0]" in report and "ref[1]" in report and "transfer" in report.lower()
        np.testing.assert_array_equal(one(x), two(x))
    placed = kiln.compile(CHAIN_KIR, devices=["ref[0]", "ref[1]"], place={"exp": "ref[1]"})
    assert "ref[1]" in placed.report("placement")
    np.testing.assert_array_equal(one(x), placed(x))


def test_tensor_parallel_partition(kiln):
    """partition="tensor:2": the ONNX Llama by heads over two ref devices, with its weights
    split (the report lists the shards and the all_reduces) and PyTorch's logits."""
    folder = os.path.join(SOURCE_ROOT, "examples", "onnx", "llama")
    tp = kiln.compile(os.path.join(folder, "model.onnx"), devices=["ref[0]", "ref[1]"],
                      partition="tensor:2")
    assert tp.devices == ["ref[0]", "ref[1]"]
    report = tp.report("placement")
    assert "all_reduce sum" in report and "(shard 1 of 2 along dim 1" in report
    for n in (1, 5):
        ids = np.load(os.path.join(folder, f"ids_{n}.npy"))
        want = np.load(os.path.join(folder, f"logits_{n}.npy"))
        np.testing.assert_allclose(tp(ids), want, rtol=1e-4, atol=1e-5)


def test_target_option(kiln):
    m = kiln.compile(ADD_KIR, target="cpu:x86-64-v2")
    np.testing.assert_array_equal(m(np.ones(4, np.float32), np.ones(4, np.float32)),
                                  np.full(4, 2, np.float32))


def test_donate_option(kiln):
    m = kiln.compile(ADD_KIR, donate="a")
    assert m.signature.args[0].donated_to == 0
    m = kiln.compile(ADD_KIR, donate=[1])
    assert m.signature.args[1].donated_to == 0


def test_save_and_load(kiln, tmp_path):
    m = kiln.compile(EMBED_KIR)
    path = tmp_path / "m.kmod"
    m.save(str(path))
    assert path.read_bytes()[:7] == b"KILNMOD"
    check_embed(kiln.load(path))
    check_embed(kiln.load(str(path), device="cpu[0]"))
    with pytest.raises(kiln.Error, match="loaded from a .kmod"):
        kiln.load(path).report("placement")


def test_functions_and_signature(kiln, cache):
    assert list(cache.functions) == ["step"]
    step = cache.functions["step"]
    assert step.name == "step"
    sig = cache.signature
    assert str(sig) == ("@step(%cache: tensor<8x4xf32> donate 0, %pos: tensor<1x1xi64>, "
                        "%kv: tensor<1x4xf32>) -> (tensor<8x4xf32>)")
    assert [(t.name, t.dtype, t.shape, t.donated_to) for t in sig.args] == [
        ("cache", "f32", (8, 4), 0), ("pos", "i64", (1, 1), None), ("kv", "f32", (1, 4), None)]
    assert sig.results[0].type == "tensor<8x4xf32>"
    with pytest.raises(KeyError, match="no function 'nope'"):
        cache._function("nope")


def test_symbols_reports_and_peak_memory(kiln, acc):
    assert acc.symbols == {"n": (1, 4096)}
    assert acc.signature.args[0].shape == ("n",)
    assert "@main" in acc.report("schedule")
    assert "peak memory" in acc.report("memory")
    assert "main" in acc.report("placement")
    # two f32 vectors of n elements live at the peak
    assert acc.peak_memory({"n": 100}) == 2 * 4 * 100
    assert acc.peak_memory() == 2 * 4 * 4096
    with pytest.raises(ValueError, match="outside its range"):
        acc.peak_memory({"n": 5000})
    with pytest.raises(ValueError, match="no symbol 'm'"):
        acc.peak_memory({"m": 1})
    with pytest.raises(ValueError, match="unknown kind"):
        acc.report("nope")


def test_devices_list(kiln):
    names = [d.name for d in kiln.devices()]
    assert "ref[0]" in names
    assert kiln.default_device() in names
    cpu = [d for d in kiln.devices() if d.name == "cpu[0]"]
    if cpu:
        assert cpu[0].target == "cpu" and cpu[0].max_buffer_bytes > 0
