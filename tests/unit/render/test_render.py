"""The renderers people read: terminal tables at 80, 100, 120, 160 and 200 columns, md, the notebook HTML, and Result's own
JSON. Golden rules: no number is broken or cut, every ns value shows a unit, no epoch is printed as a duration,
the default output of the K3 fixtures stays under 80 lines and --all shows every row."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.steps.resolve import step_options
from tracekit.annotation import load_annotation
from tracekit.cli.common import bundled_sample
from tracekit.render import emit
from tracekit.render.human import column, epoch_text, safe_text, unit_of, value_text
from tracekit.render.terminal import to_text
from tracekit.result import Result, to_json_obj
from tests.conftest import write_as_rank

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"
K3 = {"dp16_bs4": "k3_dp16", "dp2dcp8_bs64": "k3_dp2_dcp8"}
WIDTHS = (80, 100, 120, 160, 200)
EPOCH_NS = 1_764_000_000_123_456_789  # 2025-11-24 16:00:00.123456789 UTC
N = 200  # rows of the hand-built per-item table


# --------------------------------------------------------------------------- results to draw


def _hand_built() -> Result:
    """Every kind of value the rules cover: epoch and trace-clock absolute times, durations from ns to s, bytes,
    GB/s, %, long paths and long text, summary dicts (sharing keys, and not), lists, None, bools."""
    steps = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "start_ns": [EPOCH_NS, EPOCH_NS + 83_100_000, EPOCH_NS + 166_250_001],
            "dur_ns": [83_100_000, 83_150_001, 12],
            "bs": [4, 4, None],
        }
    )
    per_item = pd.DataFrame(
        {
            "ag": range(N),
            "name": [f"void very_long_kernel_name_{i}<float, 128, true>(Params)" for i in range(N)],
            "received_bytes": [48_409_998_336 + i for i in range(N)],
            "effective_gbps": [710.88] * N,
            "share_pct": [12.5] * N,
            "gaps_ns": [13_566 + i for i in range(N)],
            "path": [
                f"/very/long/directory/name/that/goes/on/and/on/d_bs{i}_100k/1758612345.12-TP-0.trace.json.gz"
                for i in range(N)
            ],
        }
    )
    summary = {
        "base_time_ns": EPOCH_NS,
        "first_gpu_start_ns": EPOCH_NS,
        "span_ns": 254_470_306,
        "median_exposed_ns_per_step": 598_423,
        "tiny_ns": 7,
        "long_ns": 61_000_000_000,
        "median_received_bytes_per_step": 48_409_998_336,
        "median_copy_gbps": 710.8812523240733,
        "median_kernel_ns_by_block_type": {
            "Dense": 115447,
            "KDA": 13101547,
            "MLA": 8071970,
            "MoE": 50217495,
            "ReplaySSM": 937211,
            "draft": 1371313,
            "head": 9181,
            "tail": 1119284,
        },
        "blocks_per_step": {
            "Dense": 1,
            "KDA": 69,
            "MLA": 24,
            "MoE": 92,
            "ReplaySSM": 1,
            "draft": 5,
            "head": 1,
            "tail": 1,
        },
        "ratio": {"64": 1.2381358272974865},
        "points": ["d_bs4_100k", "d_bs16_100k"],
        "trustworthy": True,
        "context": None,
        "out_dir": "/a/very/long/output/directory/" + "x" * 120,
        "median_ag_only_ns": 10_863_000,
        "median_ag_only_local_ns": 10_951_000,
    }
    return Result(
        "hand",
        [{"path": "/tmp/t.json"}],
        {},
        summary,
        {"steps": steps, "per_item": per_item, "empty": pd.DataFrame({"x_ns": []})},
    )


def _sweep_points() -> Result:
    df = pd.DataFrame(
        {
            "point": ["d_bs16_100k", "d_bs4_1m", "d_bs24_100k", "d_bs4_100k", "d_bs8_100k"],
            "bs": [16, 4, 24, 4, 8],
            "context": [100_000, 1_000_000, 100_000, 100_000, 100_000],
            "median_wall_ns": [1, 2, 3, 4, 5],
        }
    )
    return Result("analyze", [], {}, {}, {"sweep": df})


@pytest.fixture(scope="module")
def results():
    k3 = load_annotation("k3_dp16")
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)
    st = step_options(k3)
    return {
        "hand": _hand_built(),
        "info": tracekit.trace_info(t),
        "steps": tracekit.step_windows(t, steps=st),
        "allgather": tracekit.allgathers(t, k3, steps=st),
        "exposure": tracekit.exposure(t, k3, steps=st),
        "report": tracekit.report(t, k3, steps=st),
        "hw": tracekit.hw_profiles("b200"),
        "kernels": tracekit.kernel_stats(t),
        "sweep": _sweep_points(),
    }


# --------------------------------------------------------------------------- the golden rules

_GROUPED = re.compile(r"(?<![\d,])\d[\d,]*\d(?![\d,])|(?<![\d,])\d(?![\d,])")
_WELL_FORMED = re.compile(r"\d{1,3}(?:,\d{3})*|\d+")
_EPOCH_AS_DURATION = re.compile(r"\d{1,3}(?:,\d{3}){3,}(?:\.\d+)?\s*(?:s|ms|µs|ns)\b")


def _check_numbers(text: str) -> None:
    """No digit group is split or cut: every run of digits and commas is a well-formed number."""
    for line in text.splitlines():
        for m in re.finditer(r"\d[\d,]*", line):
            run = m.group().rstrip(",")  # "3, 4" lists
            if "," in run:
                assert re.fullmatch(r"\d{1,3}(?:,\d{3})+", run), (run, line)
        # a number cut at the edge (a list "32, 64" may wrap after its comma: words are kept whole)
        assert not re.search(r"\d,\d{0,2}…|\d,\d{1,2}$", line), line


def _check_width(text: str, width: int) -> None:
    for line in text.splitlines():
        footnote = re.match(r"\[\d+\] ", line) or " under /" in line
        assert footnote or len(line) <= width, (width, line)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["hand", "info", "steps", "allgather", "exposure", "report", "hw", "kernels"])
def test_terminal_golden_rules(results, name, width):
    r = results[name]
    for all_rows in (False, True):
        text = to_text(r, width=width, all_rows=all_rows)
        _check_width(text, width)
        _check_numbers(text)
        assert not _EPOCH_AS_DURATION.search(text), _EPOCH_AS_DURATION.search(text)
        assert not re.search(r"\b\w+_ns\b", text), re.search(r"\b\w+_ns\b", text)  # no ns key left without its unit
        assert "\x1b" not in text


def test_every_ns_value_shows_a_unit(results):
    units = (" ms", " µs", " ns", " s")
    for name, r in results.items():
        for k, v in r.summary.items():
            if unit_of(k).kind in ("ns", "abs", "epoch") and not isinstance(v, (dict, list)) and v is not None:
                text = value_text(k, v, None)
                assert text.endswith(units) or text.endswith("UTC") or "trace clock" in text, (name, k, text)
        for t, df in r.tables.items():
            for c in df.columns:
                if unit_of(c).kind == "ns" and len(df):
                    col = column(c, df[c].tolist())
                    assert col.header.endswith(units) or col.kind == "epoch", (name, t, c, col.header)


def test_absolute_times_are_relative_and_epochs_are_dates(results):
    text = to_text(results["hand"], width=100)
    assert epoch_text(EPOCH_NS) == "2025-11-24 16:00:00.123456789 UTC"
    assert "base time" in text and "2025-11-24 16:00:00.123456789 UTC" in text
    assert "+83.100" in text and "+166.250" in text  # exact: the epoch ns are not floats
    assert "+ times: ms after the first step's start (2025-11-24 16:00:00.123456789 UTC)" in text
    info = to_text(results["info"], width=100)
    assert "+0.000 ms" in info and "+254.470 ms" in info and "2025-10-29 13:13:00 UTC" in info
    assert "5,120" not in info.split("+ times")[0]  # the trace clock appears only in the note naming the origin


def test_units_in_headers_and_dicts_as_tables(results):
    text = to_text(results["hand"], width=160)
    assert "received GB" in text and "effective GB/s" in text and "share %" in text and "gaps µs" in text
    assert "48.410" in text and "48.410 GB" in text  # bytes: a unit, not 48,409,998,336
    assert "598.423 µs" in text or "0.598 ms" in text  # median_exposed_ns_per_step has its unit
    assert "1 m 1.000 s" not in text and "61.000 s" in text and "7 ns" in text
    assert "by block type" in text and "median kernel ms" in text and "blocks per step" in text
    assert '{"' not in text.split("per_item")[0]  # no raw JSON dicts in the summary
    assert "64: 1.238" in text  # a small dict stays inline
    assert "no rows: empty" in text and "\nempty\n" not in text


def test_long_text_is_shortened_and_paths_move_to_a_note(results):
    text = to_text(results["hand"], width=80)
    assert "very_long_kernel_name_" in text and "void very" not in text  # kernel names shortened (names.py)…
    assert "path: under /very/long/directory/name/that/goes/on/and/on/" in text  # …paths lose their common folder
    assert re.search(r"…\S*TP-0\.trace\.json\.gz$", text, re.M)  # a path too long for its column keeps its end
    assert re.search(r"\[1\] /a/very/long/output/directory/x+$", text, re.M)  # a long summary path: a footnote


def test_concise_by_default_and_all_gives_every_row(results):
    r = results["hand"]
    short, full = to_text(r, width=100), to_text(r, width=100, all_rows=True)
    assert "per_item — top" in short and "more with --all" in short
    assert "more with --all" not in full
    assert len([ln for ln in full.splitlines() if re.match(r"\s*\d+\s+very_long_kernel_name_\d+\s", ln)]) == N
    assert len(short.splitlines()) <= 80 < len(full.splitlines())


@pytest.mark.slow
def test_glossary_under_the_first_block_with_two_allgather_measures(results):
    text = " ".join(to_text(results["report"], width=100, all_rows=True).split())  # report's tables: --all
    assert text.count("ag only: only AllGather PtoP copies run") == 1
    assert "ag only local: the same, local copies counted" in text and "exposed: copy time no other GPU" in text
    assert "ag only:" not in to_text(results["kernels"], width=100)


def test_sweep_points_sort_by_bs_then_context(results):
    text = to_text(results["sweep"], width=100)
    order = [m.group(1) for m in re.finditer(r"^(d_bs\S+)", text, re.M)]
    assert order == ["d_bs4_100k", "d_bs4_1m", "d_bs8_100k", "d_bs16_100k", "d_bs24_100k"]
    doc = json.loads(emit(results["sweep"], "json"))
    assert [r["point"] for r in doc["tables"]["sweep"]][0] == "d_bs16_100k"  # JSON keeps the data's order


def test_markdown_has_units_and_a_more_line(results):
    md = emit(results["hand"], "md")
    assert "| received GB |" in md.replace(" | ", " | ") and "`--all`" in md
    assert md.count("\n| ") < emit(results["hand"], "md", all_rows=True).count("\n| ")


# --------------------------------------------------------------------------- line counts of the K3 fixtures


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(K3))
def test_default_output_of_the_k3_fixtures_stays_under_80_lines(cli, fixture, tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # not a terminal: 100 columns
    trace = SYN / f"{fixture}.trace.json.gz"
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        write_as_rank(trace, ranks / f"1758612345.12-TP-{r}.trace.json.gz", r)
    for args in (
        ("exposure", trace, "-a", K3[fixture]),
        ("allgather", trace, "-a", K3[fixture]),
        ("report", trace, "-a", K3[fixture]),
        ("imbalance", ranks),
    ):
        code, out, err = cli(*args)
        assert code == 0, err
        assert len(out.splitlines()) < 80, (args[0], len(out.splitlines()))
        code, full, err = cli(*args, "--all")
        assert code == 0, err
        doc = json.loads(cli(*args, "--format", "json")[1])
        rows = sum(len(t) for t in doc["tables"].values())
        assert "more with --all" not in full and len(full.splitlines()) >= rows, args[0]
        assert "more with --all" in out or len(out.splitlines()) >= rows


# --------------------------------------------------------------------------- Result in a notebook


@pytest.mark.slow
def test_result_to_json_is_the_cli_document(cli):
    code, out, _ = cli("info", "--format", "json", "--no-cache")
    r = tracekit.trace_info(tracekit.load(bundled_sample(), cache=False))
    doc, mine = json.loads(out), r.to_dict()
    for x in (doc, mine):
        for i in x["inputs"]:
            i.pop("from_cache")
    assert json.loads(r.to_json()) == json.loads(json.dumps(to_json_obj(r)))
    assert doc == mine
    assert r.to_json() == emit(r, "json") and r.to_json().endswith("}\n")
    frames = r.frames()
    assert list(frames) == ["summary", *r.tables] and len(frames["summary"]) == 1
    assert frames["summary"].loc[0, "kernels"] == 147
    frames["by_kind"].loc[0, "count"] = -1
    assert r.tables["by_kind"].loc[0, "count"] != -1  # copies


def test_repr_html_is_escaped_tables():
    df = pd.DataFrame(
        {"name": ["<script>alert(1)</script>", "a\x1b[31mb", "x & y"], "total_ns": [1_000_000, 2_000_000, 3]}
    )
    r = Result("kernels", [], {}, {"marker": "<b>bold</b>", "span_ns": 5_000_000}, {"kernels": df})
    html = r._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;bold" in html
    assert "\x1b" not in html and "\\x1b" in html and "x &amp; y" in html
    assert "<th>total ms</th>" in html and "5.000 ms" in html


def test_safe_text_makes_controls_visible():
    assert safe_text("a\x1b[2Jb\r\n\t\u202e\u2028\x00") == "a\\x1b[2Jb\\r\\n\\t\\u202e\\u2028\\x00"
    assert safe_text("naïve 中文 [/]") == "naïve 中文 [/]"


# --------------------------------------------------------------------------- kernel names in md (issue 29)

MANGLED = {  # a full kernel name -> how a person reads it (hand-written, as tracekit/data/kernel_names.json says)
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, at::detail::Array<char*, 1> >"
    "(int, at::native::FillFunctor<long>, at::detail::Array<char*, 1>)": "vectorized_elementwise_kernel<FillFunctor>",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float,"
    " float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::"
    "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>"
    "(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::"
    "binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float,"
    " at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})": "elementwise_kernel<MulFunctor>",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "ncclDevKernel_AllGather_RING_LL",
}


def _kernels_result() -> Result:
    names = list(MANGLED)
    df = pd.DataFrame({"name": names, "count": [30, 20, 10], "total_ns": [3_000_000, 2_000_000, 1_000_000]})
    return Result(command="kernels", inputs=[], params={}, summary={"names_total": 3}, tables={"kernels": df})


def _md_names(md: str) -> list[str]:
    """The first cell of every row of the md kernels table (the pipe escapes undone)."""
    rows = md.split("### kernels", 1)[1].splitlines()[4:]
    return [r[2:].split(" | ")[0].replace("\\|", "|").replace("\\\\", "\\") for r in rows if r.startswith("| ")]


def test_md_shortens_kernel_names_as_the_terminal_does_and_wide_keeps_them_whole():
    """Issue 29: names shortened for people (table and md) with the full name in json, csv and with --wide."""
    r = _kernels_result()
    assert _md_names(emit(r, "md")) == list(MANGLED.values())
    assert _md_names(emit(r, "md", wide=True)) == list(MANGLED)
    table = emit(r, "table", width=200)
    assert all(short in table for short in MANGLED.values()) and "void at::native" not in table
    doc = json.loads(emit(r, "json"))
    assert [row["name"] for row in doc["tables"]["kernels"]] == list(MANGLED)
    assert pd.read_csv(io.StringIO(emit(r, "csv")))["name"].tolist() == list(MANGLED)


def test_md_names_that_would_read_the_same_stay_different():
    """Two different kernels whose short forms collide get longer forms in md, as in the terminal."""
    a, b = (
        f"void at::native::vectorized_elementwise_kernel<{n}, at::native::FillFunctor<long>, "
        "at::detail::Array<char*, 1> >(int)"
        for n in (4, 8)
    )
    r = Result(
        command="kernels",
        inputs=[],
        params={},
        summary={},
        tables={"kernels": pd.DataFrame({"name": [a, b], "count": [1, 2]})},
    )
    shown = _md_names(emit(r, "md"))
    assert len(set(shown)) == 2 and not any(s.startswith("void ") for s in shown), shown


def test_the_cli_md_shortens_kernel_names_unless_wide(cli):
    sample = bundled_sample()
    code, short, _ = cli("kernels", sample, "-f", "md")
    assert code == 0
    code, whole, _ = cli("--wide", "kernels", sample, "-f", "md")
    assert code == 0
    code, doc, _ = cli("kernels", sample, "-f", "json")
    full = [row["name"] for row in json.loads(doc)["tables"]["kernels"]]
    assert any(n.startswith("void ") for n in full)  # the sample has mangled names to shorten
    assert _md_names(whole) == full
    shown = _md_names(short)
    assert len(shown) == len(full) and len(set(shown)) == len(set(full))
    assert not any(n.startswith("void ") for n in shown) and sum(map(len, shown)) < sum(map(len, full))
