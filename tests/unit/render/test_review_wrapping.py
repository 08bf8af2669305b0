"""Terminal tables at COLUMNS=80 (review of issues 39/42): a category value or a header wraps at `_`, a space or
`,`, never mid-word ("attention_prefil" / "l", "declared_hardwa" / "re"), and a kernel name is shortened by the
one shortener (tracekit/names.py) to a form of one or two lines, also where several names read the same."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.analyses.categories import load_categories
from tracekit.names import WIDTH, distinct_names, short_name
from tracekit.render.table_layout import wrap_cell
from tracekit.render.terminal import to_text
from tracekit.result import Result
from tests.conftest import CORPUS, kernel, write_trace

CATEGORIES = [c for c in load_categories().categories if c != "other"]

# real names: nsys's demangler (`(int)128`, `[lambda() (instance 3)]`, `<unnamed>::`) and ROCm Kineto's
NSYS = [
    "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() "
    "(instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::"
    "[lambda(int) (instance 1)]>(int, T3)",
    "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() "
    "(instance 12)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase &, const T1 &)"
    "::[lambda(int) (instance 1)]>(int, T3)",
    "void at::native::<unnamed>::CatArrayBatchedCopy_vectorized<at::native::<unnamed>::OpaqueType<(unsigned int)2>, "
    "unsigned int, (int)1, (int)128, (int)1, (int)16, (int)8>(char *, at::native::<unnamed>::CatArrInputTensorMetadata"
    "<T1, T2, T4, T5>, at::native::<unnamed>::TensorSizeStride<T2, (unsigned int)4>, int, T2)",
]
ROCM = [
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()()"
    " const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_"
    "nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()"
    "#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&)::{lambda(int)#1})",
    "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::gpu_kernel_impl<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#4}::operator()()"
    " const::{lambda(long)#1}>(at::TensorIteratorBase&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native"
    "::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#4}::operator()()"
    " const::{lambda(long)#1}>(at::TensorIteratorBase&)::{lambda(int)#1})",
]


def test_wrap_cell_breaks_at_joints_only():
    assert wrap_cell("attention_prefill", 16) == "attention_\nprefill"
    assert wrap_cell("declared_hardware", 15) == "declared_\nhardware"
    assert wrap_cell("share of busy %", 6) == "share\nof\nbusy %"
    assert wrap_cell("attention_prefill", 17) == "attention_prefill"
    assert wrap_cell("a_verylongpieceofname", 8) == "a_\nverylong\npieceofn\name"  # a piece wider than the line folds


def test_the_shortener_reads_nsys_and_rocm_names():
    assert short_name(NSYS[0]) == "elementwise_kernel<direct_copy_kernel_cuda>"
    assert short_name(NSYS[2]) == "CatArrayBatchedCopy_vectorized"
    assert short_name(ROCM[0]) == "elementwise_kernel_manual_unroll<direct_copy_kernel_cuda>"
    for group in (NSYS[:2], ROCM):  # two names that read the same: told apart in a few words, not whole
        shown = distinct_names(group)
        assert len(set(shown)) == 2 and all(len(s) <= WIDTH + 12 for s in shown), shown
        assert all(s.startswith(short_name(group[0]) + " [") for s in shown)


def _words_whole(text: str, words: list[str]) -> list[str]:
    """The pieces of ``text`` that are a word of ``words`` cut anywhere but at a joint."""
    bad = []
    for tok in text.split():
        for w in words:
            if tok != w and w.startswith(tok) and len(tok) >= 4 and not tok.endswith(("_", ",", "/")):
                bad.append(tok)
    return bad


def test_categories_and_headers_whole_at_80_columns():
    names = NSYS + ROCM
    df = pd.DataFrame(
        {
            "name": names,
            "count": [30, 78, 4, 72, 1],
            "total_ns": [120_358_000, 9_232_000, 5_000, 346_650, 5_450],
            "mean_ns": [4_011_940.0, 118_350.0, 1_250.0, 4_810.0, 5_450.0],
            "median_ns": [4_011_620.0, 65_120.0, 1_250.0, 4_770.0, 5_450.0],
            "share_of_busy_pct": [50.1, 3.8, 0.0, 3.5, 0.1],
            "category": ["attention_prefill", "attention_combine", "attention_paged", "copy_kernel", "copy_kernel"],
            "declared_hardware": ["NVIDIA"] * 5,
            "trace_framework": ["sglang"] * 5,
        }
    )
    r = Result(command="kernels", inputs=[], params={}, summary={}, tables={"kernels": df}, warnings=[])
    text = to_text(r, width=80, all_rows=True)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not _words_whole(text, CATEGORIES + ["declared_hardware", "trace_framework"]), text
    assert "attention_\n" not in text or "prefill" in text
    for shown in distinct_names(names):  # each name a few lines of the narrowest name column, not ten
        assert len(wrap_cell(shown, 24).split("\n")) <= 3, shown
    assert "(instance" not in text and "{lambda" not in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--device", "0", "kernels", CORPUS / "nsys-ai/tests/fixtures/mfu_2gpu_after.sqlite"],
        ["kernels", CORPUS / "tracelens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"],
        ["--device", "0", "report", CORPUS / "nsys-ai/tests/fixtures/mfu_2gpu_after.sqlite"],
    ],
    ids=["nsys-kernels", "sglang-kernels", "nsys-report"],
)
def test_real_tables_at_80_columns(cli, monkeypatch, args):
    if not args[-1].exists():
        pytest.skip(f"{args[-1]} is not in ../shared/corpus")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(*args)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert not _words_whole(out, CATEGORIES), out
    assert "(instance" not in out and "(int)128" not in out  # the nsys names shortened, not wrapped whole


def test_a_hand_built_trace_at_80_columns(tmp_path, cli, monkeypatch):
    events = [kernel(n, 10 * i, 5, corr=i + 1) for i, n in enumerate(NSYS + ROCM)]
    events.append(kernel("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128> >(Params)", 100, 50, corr=9))
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("kernels", path)
    assert code == 0 and not _words_whole(out, CATEGORIES), out
    assert "(instance" not in out and "{lambda" not in out
