"""Output is for people too (issue 42's review at 80 columns): a number stays with its unit and keeps its thousands
separators, a path folds between its folders, a kernel name too wide for a line reads in its short form (findings
text and compare's ``kernel_b``), a summed gain is labelled as the bound it is, stderr warnings wrap to the terminal
and say a fact once, and the report's step tables read in one unit."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.render.findings_text import findings_lines
from tracekit.render.human import label_of, wrap_prose
from tracekit.render.table_layout import _draw, _table_block, wrap_cell
from tracekit.render.terminal import to_text
from tracekit.render.warning_folding import fold_warnings, warning_lines
from tracekit.result import Result

CIJK = (
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
    "DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA512_LBSPPB512_LBSPPM0_LPA16_LPB16_"
    "LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA4_NTB0_NTC0_NTD4_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_"
    "SS1_SPO0_SRVW0_SSO0_SVW1_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1"
)
PATH = "/work/shared/corpus/tracelens/tests/traces/inference/vllm_decode_full/graph_execution.json.gz"
FLASH = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0,"
    " cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0,"
    " (bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(flash::Flash_fwd_params)"
)


def _finding(**kw) -> pd.DataFrame:
    row = {
        "rank": 1,
        "kind": "x",
        "title": "GPU idle with no launch record: 10,889 ms per step",
        "gain_ms_per_step": 10888.911,
        "gain_pct": 72.0,
        "gain_gib": None,
        "basis": "measured",
        "how": "how",
        "evidence": "evidence",
        "suggestion": "try",
        "command": f"tracekit wall {PATH}",
        "minor": False,
        "source": "idle",
    }
    row.update(kw)
    return pd.DataFrame([row])


@pytest.mark.parametrize("width", [80, 60, 44])
def test_a_number_stays_with_its_unit_and_its_separators(width):
    lines = findings_lines("findings", _finding(), width, False)
    text = "\n".join(lines)
    assert "10,888.911 ms/step" in text and "72.0 %" in text  # separators; number and unit on one line
    assert all(len(ln) <= width for ln in lines)
    for ln in lines:
        assert not ln.rstrip().endswith(("72.0", "10,888.911", "10,")), ln


def test_prose_and_cells_never_split_a_number():
    for w in range(12, 40):
        for ln in wrap_prose("it took 4,031.076 ms per step and 26.5 % of it, 1,234,567 launches", w):
            assert not ln.endswith(("4,031.076", "26.5", "4,", "1,234,")), (w, ln)
    assert wrap_cell("12,345.678 ms", 10).split("\n")[0] == "12,345.678"  # the number whole, its unit after


def test_a_path_folds_between_its_folders():
    lines = wrap_prose(f"    see   tracekit roofline {PATH}", 80, "    ")
    assert lines[-1].strip() == "graph_execution.json.gz"
    assert all(len(ln) <= 80 for ln in lines)
    assert "".join(ln.strip() for ln in lines[1:]) == PATH


def test_a_kernel_name_too_wide_reads_short_unless_wide():
    df = _finding(evidence=f"24 shaped calls, 366 µs per step; {CIJK}")
    short = "\n".join(findings_lines("findings", df, 80, False))
    assert "hipBLASLt MT32x32x256" in short and "Cijk_Alik" not in short
    whole = "".join(ln.strip() for ln in findings_lines("findings", df, 80, False, wide=True))
    assert CIJK in whole.replace(" ", "")


def test_compare_kernel_b_is_a_name_column():
    df = pd.DataFrame({"op": ["flash_fwd_kernel<Flash_fwd_kernel_traits>"], "kernel": [FLASH], "kernel_b": [FLASH]})
    lines = _draw(_table_block("ops", df, None, 80), _table_block("ops", df, None, 80).rows, 80)
    assert len(lines) <= 6, "\n".join(lines)
    assert "(bool)0" not in "\n".join(lines)


def test_the_summed_gain_is_labelled_as_a_bound():
    assert label_of("total_gain_ms", {"total_gain_ms": 1, "total_gain_gib": 2}) == "gains at most"
    r = Result(
        command="findings",
        inputs=[],
        params={},
        summary={"step_ms": 15122.0, "total_gain_ms": 14921.7, "total_gain_gib": None},
        tables={},
        warnings=[],
    )
    text = to_text(r, 80)
    assert "total gain" not in text and "gains at most" in text


def test_warnings_say_a_fact_once_and_wrap():
    own = "/data/mfu_2gpu_before.sqlite: no step marker; the whole GPU span (299.849 ms) is analysed as one step"
    other = own.replace("299.849", "298.662")
    ws = [own, "no PtoP copies", f"ranks: rank 0: {own}", f"ranks: rank 1: {other}"]
    assert [f.text for f in fold_warnings(ws)] == [own, "no PtoP copies", f"ranks: rank 1: {other}"]
    lines = warning_lines(ws, 80)
    assert all(len(ln) <= 80 for ln in lines) and sum(ln.startswith("warning: ") for ln in lines) == 3
    assert not any(ln.rstrip().endswith("299.849") for ln in lines)
    assert warning_lines(ws, None)[0] == f"warning: {own}"  # no terminal: one line each


@pytest.mark.slow
def test_cli_warnings_wrap_to_columns(tmp_path, cli, monkeypatch):
    from tests.conftest import kernel, write_trace

    long_dir = tmp_path / ("a_rather_long_folder_name_" * 4)
    long_dir.mkdir()
    path = write_trace(long_dir / "t.json", [kernel("gemm_kernel", 10, 50)])
    monkeypatch.setenv("COLUMNS", "80")
    code, _, err = cli("report", path)
    assert code == 0 and err.startswith("warning:")
    assert all(len(ln) <= 80 for ln in err.splitlines()), err


def test_report_step_tables_read_in_one_unit():
    from tracekit.render.report_text import report_text

    def step(over_ns):
        one = pd.DataFrame(
            {
                "step": [0, 0, 0],
                "group_by": ["category", "category", "layer_type"],
                "name": ["gemm", "idle", "attn"],
                "wall_ns": [5_000_000, 1_000_000, 5_000_000],
                "wall_pct": [80.0, 20.0, 80.0],
                "overlapped_ns": over_ns,
            }
        )
        r = Result(command="report", inputs=[], params={}, summary={"steps": 1}, tables={"one_step": one}, warnings=[])
        return report_text(r, 80)

    for over in ([0, 0, 0], [120_000, 300, 5], [7_000, 9_000, 0]):  # ns, µs or ms by their size before
        text = step(over)
        assert text.count("overlapped ms") == 2 and "overlapped µs" not in text and "overlapped ns" not in text
