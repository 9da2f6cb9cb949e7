"""Custom-op libraries built with ``make`` against the Poplar SDK, answered under the emulator
as if built (issue 41, item 1), and the CPU implementations of the ops Graphcore's applications
use, each against the op's C++ semantics (the files named in popviz.emulator.custom_graphcore)."""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import custom_ctc, custom_graphcore, custom_libs, custom_ops  # noqa: E402

from conftest import run_cli, unwrapped  # noqa: E402

SCRIPTS = Path(__file__).parent / "custom_op_scripts"


@pytest.fixture
def answering(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    custom_libs.install()
    yield tmp_path
    custom_libs.uninstall()


def test_missing_libraries_are_answered_once_each_and_nothing_is_written(answering, capsys):
    assert os.path.exists("build/custom_ops.so")
    assert os.path.isfile("./build/custom_ops.so")
    assert pathlib.Path("ema/build/exp_avg_custom_op.so").exists()
    assert pathlib.Path("ema/build/exp_avg_custom_op.so").is_file()
    lib = ctypes.cdll.LoadLibrary("./build/custom_ops.so")
    assert isinstance(lib, custom_libs.EmulatedLibrary)
    with pytest.raises(AttributeError, match="symbol 'init' is not available"):
        _ = lib.init
    torch.ops.load_library(pathlib.Path("leaky/custom_ops.so"))
    assert str(answering / "leaky" / "custom_ops.so") in torch.ops.loaded_libraries
    lines = unwrapped(capsys.readouterr().err).splitlines()  # each message wraps at the terminal's width
    assert len(lines) == 3  # one message per library, not per check
    assert lines[0].startswith("popviz emulator: custom-op library build/custom_ops.so is not built: "
                               "answered as if built")
    assert list(answering.iterdir()) == []  # nothing written into the user's tree
    assert custom_libs.answered() == sorted(str(answering / p) for p in (
        "build/custom_ops.so", "ema/build/exp_avg_custom_op.so", "leaky/custom_ops.so"))


def test_other_checks_and_loads_are_untouched(answering):
    assert not os.path.exists("build/custom_ops.txt")
    assert not pathlib.Path("missing.so.txt").exists()
    with pytest.raises(OSError):
        ctypes.CDLL("./build/not_a_library.txt")
    assert ctypes.CDLL(None)._handle != 0  # the main program still loads
    (answering / "broken.so").write_bytes(b"not an ELF file")
    with pytest.raises(OSError, match="broken.so"):  # there but unloadable: the user's to fix
        ctypes.CDLL("./broken.so")
    custom_libs.uninstall()
    assert not os.path.exists("build/custom_ops.so")


def test_sdk_dependency_errors_are_answered():
    assert custom_libs._missing_or_sdk("/x/y.so", None) == "is not built"
    error = OSError("libpopart.so: cannot open shared object file: No such file or directory")
    assert custom_libs._missing_or_sdk(__file__.replace(".py", ".so"), error) == "is not built"
    existing = str(Path(__file__).resolve())[:-3] + ".so"
    assert custom_libs._missing_or_sdk(os.path.basename(existing), OSError(
        "libpoplar.so.2: cannot open shared object file: No such file or directory")) == "needs the Poplar SDK"
    assert custom_libs._missing_or_sdk("x.so", OSError("x.so: invalid ELF header")) is None
    assert custom_libs._missing_or_sdk("libc.so.6", OSError("whatever")) is None


def _op(inputs, name, domain, outputs, **attributes):
    return poptorch.custom_op(inputs, name, domain, 1, example_outputs=outputs, attributes=attributes or None)


def test_layout_copies_leaky_relu_cube_and_gather():
    x = torch.tensor([[-2.0, 0.5], [3.0, -4.0]])
    for name in ("RemapCE", "CopyTensor"):
        [y] = _op([x], name, "ai.graphcore", [x], fwd_grain_size=16, debug_str="d")
        assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    [y] = _op([x], "LeakyRelu", "custom.ops", [x], alpha=0.5)
    assert y.tolist() == [[-1.0, 0.5], [3.0, -2.0]]
    [y] = _op([x], "LeakyRelu", "custom.ops", [x])
    assert y.flatten().tolist() == pytest.approx([-0.02, 0.5, 3.0, -0.04])
    [y] = _op([torch.tensor([0.3, 2.7, 1.2, 5.0])], "Cube", "com.acme", [x])
    assert y.tolist() == pytest.approx([0.027, 19.683, 1.728, 125.0])  # cube_op_example's output
    data, idx = torch.arange(12.0).reshape(2, 6), torch.tensor([[5, 0, 1], [2, 2, 3]], dtype=torch.int32)
    [y] = _op([data, idx], "FastGatherLastDim", "poptorch.custom_ops", [torch.zeros(2, 3)])
    assert y.tolist() == [[5.0, 0.0, 1.0], [8.0, 8.0, 9.0]]


def test_exp_mov_avg_updates_the_teacher_in_place():
    q, k = torch.tensor([1.0, 3.0]), torch.tensor([5.0, -1.0])
    with torch.no_grad():
        [out] = _op([q, k, torch.tensor(0.75)], "ExpMovAvg", "com.acme", [q])
    assert k.tolist() == [4.0, 0.0] and out.tolist() == [4.0, 0.0]  # 0.75 k + 0.25 q


def test_ctc_matches_pytorch_and_keeps_poparts_gradient():
    g = torch.Generator().manual_seed(3)
    steps, batch, classes = 12, 3, 6
    log_probs = torch.randn(steps, batch, classes, generator=g).log_softmax(2)
    targets = torch.randint(1, classes, (batch, 4), generator=g)
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    il, tl = torch.tensor([12, 10, 7]), torch.tensor([4, 2, 0])
    lp = log_probs.clone().requires_grad_()
    ref = torch.nn.functional.ctc_loss(lp, targets, il, tl, reduction="none")
    nll, grad = custom_ctc.loss_and_gradient(log_probs, targets, il, tl, 0)
    assert torch.allclose(nll, ref.detach(), atol=1e-5)
    ref.sum().backward()
    # PyTorch's gradient is with respect to the logits before log_softmax; PopLibs' is with
    # respect to the log-probabilities: PyTorch's minus exp(log_probs), zero past a sample's length
    inside = torch.arange(steps).view(-1, 1, 1) < il.view(1, -1, 1)
    assert torch.allclose(grad, torch.where(inside, lp.grad - log_probs.exp(), 0.0), atol=1e-5)
    for reduction, torch_reduction in (("Mean", "mean"), ("Sum", "sum")):
        x = log_probs.clone().requires_grad_()
        dummy = torch.zeros((), requires_grad=True)
        loss, saved = _op([x, targets, il, tl], "Ctc", "ai.graphcore", [dummy, x], reduction=reduction, blank=0,
                          outDataType="UNDEFINED", enableReducedClassesInLabel=True)
        expected = torch.nn.functional.ctc_loss(log_probs, targets, il, tl, reduction=torch_reduction)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
        assert torch.allclose(saved, grad, atol=1e-5)
        loss.backward()
        scale = (1 / batch / tl.clamp(min=1).float()).view(1, -1, 1) if reduction == "Mean" else 1.0
        assert torch.allclose(x.grad, grad * scale, atol=1e-6)


def test_nms_follows_the_codelets():
    # one image, three boxes, two classes: box 1 overlaps box 0 (IoU 0.81), box 2 is apart
    boxes = torch.tensor([[[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 9.0, 9.0], [20.0, 20.0, 30.0, 30.0]]])
    scores = torch.tensor([[[0.9, 0.1], [0.8, 0.7], [0.3, 0.2]]])
    idx, sc, bx, cls, n = custom_graphcore.nms(scores, boxes, threshold=0.5, scoreThreshold=0.15, numDetections=3)
    # 0.9 (box 0, class 0) suppresses box 1's class 0; then 0.7 (box 1, class 1); then 0.3 (box 2)
    assert idx.tolist() == [[0, 1, 2]] and cls.tolist() == [[0, 1, 0]] and n.tolist() == [3]
    assert sc[0].tolist() == pytest.approx([0.9, 0.7, 0.3]) and bx[0, 2].tolist() == [20.0, 20.0, 30.0, 30.0]
    # a higher score threshold leaves slots empty: -1, 0, INT32_MAX and the count
    idx, sc, bx, cls, n = custom_graphcore.nms(scores, boxes, threshold=0.5, scoreThreshold=0.5, numDetections=3)
    assert idx.tolist() == [[0, 1, -1]] and n.tolist() == [2] and cls[0, 2].item() == 2 ** 31 - 1
    assert sc[0, 2].item() == 0.0
    # soft NMS (sigma > 0) scales the overlapping box's class-0 score instead of removing it
    soft = torch.tensor([[[0.9, 0.1], [0.8, 0.7], [0.1, 0.05]]])
    idx, sc, _, cls, _ = custom_graphcore.nms(soft, boxes, threshold=0.5, numDetections=3, sigma=0.5)
    iou = 81.0 / 100.0
    assert idx.tolist() == [[0, 1, 1]] and cls.tolist() == [[0, 1, 0]]
    assert sc[0].tolist() == pytest.approx([0.9, 0.7, 0.8 * float(torch.exp(torch.tensor(-iou * iou / 0.5)))])
    # through poptorch.custom_op, outputs take their example outputs' dtypes (yolo_v4 asks for int64 indices)
    out = _op([scores, boxes], "Nms", "ai.graphcore", [torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2),
                                                         torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.int),
                                                         torch.zeros(1, dtype=torch.int)],
              threshold=0.5, scoreThreshold=0.15, numDetections=2, useGather=1)
    assert out[0].dtype == torch.long and out[0].tolist() == [[0, 1]]


def test_a_users_own_cpu_implementation_still_wins():
    x = torch.tensor([-1.0, 1.0])
    custom_ops.register_cpu_implementation("LeakyRelu", "custom.ops", lambda t, alpha=0.0: t * 7)
    try:
        assert _op([x], "LeakyRelu", "custom.ops", [x], alpha=0.5)[0].tolist() == [-7.0, 7.0]
    finally:
        from popviz.emulator import custom_cpu

        custom_cpu._cpu.pop(("custom.ops", "LeakyRelu"))


def test_scripts_that_assert_and_load_a_missing_library_run_under_capture(tmp_path):
    proc = run_cli("capture", "--emulate", "--calls", "1", "-o", str(tmp_path / "cap"), "--", sys.executable,
                   str(SCRIPTS / "missing_so_ctypes.py"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    answered = [ln for ln in unwrapped(proc.stderr).splitlines() if "custom-op library" in ln]
    assert answered == ["popviz emulator: custom-op library build/custom_ops.so is not built: answered as if "
                        "built (no Poplar SDK to build it here); its custom ops run on popviz's CPU "
                        "implementations or as zeros shaped like their example outputs (docs/emulator.md, "
                        "custom ops)"]
    assert "has no CPU implementation" not in proc.stderr  # RemapCE, Ctc, ExpMovAvg all run
    assert "2 stage(s)" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]  # no build/ appeared
    analysed = run_cli("analyse", str(tmp_path / "cap"), "--json", timeout=300)
    assert analysed.returncode in (0, 1), analysed.stderr
    proc = run_cli("emulate", "--", sys.executable, str(SCRIPTS / "missing_so_torch_ops.py"), cwd=tmp_path,
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("leaky [-0.1, 2.0, -0.3, 4.0] fallback 0.0 loaded 1"), proc.stdout
    assert "custom-op library leaky_relu_example/build/custom_ops.so is not built" in proc.stderr
    assert "custom op custom.ops::Unknown (version 1) has no CPU implementation" in proc.stderr
