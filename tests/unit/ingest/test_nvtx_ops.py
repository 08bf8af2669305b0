"""PyTorch emit_nvtx op ranges in an nsys export → cpu_ops with their sizes, linked to the kernels they launch; an
export without them: the commands that need ops exit 4 naming the nsys/emit_nvtx options that record them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracekit.ingest import load
from tracekit.ingest.nsys_sqlite import rules
from tracekit.ingest.nvtx_ops import parse_op_texts, shapes_key

GPID = (0x1000000 << 24) | (144 << 24)
TID = GPID | 7
OTHER_TID = GPID | 8

LINEAR = "aten::linear, seq = 5, op_id = 10, sizes = [[8, 16], [32, 16], [32]], input_op_ids = [(1,0), (2,0), (3,0)]"
T = "aten::t, seq = 5, op_id = 11, sizes = [[32, 16]], input_op_ids = [(2,0)]"
ADDMM = "aten::addmm, seq = 5, op_id = 12, sizes = [[32], [8, 16], [16, 32], [], []], input_op_ids = [(3,0), (1,0)]"
RELU = "aten::relu, seq = 6, op_id = 13"  # recorded without record_shapes
EMPTY = "aten::empty, op_id = 14"  # an op with no autograd sequence number

# (start, end, text or textId, thread): the op ranges PyTorch pushes around each op, nested as the ops call each other
RANGES = [
    (500, 40_000, "train step", TID),  # a user range around everything: stays an annotation
    (1_000, 9_000, 2, TID),  # LINEAR, a registered string
    (1_100, 1_500, T, TID),
    (2_000, 8_000, ADDMM, TID),
    (10_000, 12_000, RELU, TID),
    (12_500, 12_600, EMPTY, TID),
    (13_000, 14_000, "aten::mm, seq = 9, op_id = 15, sizes = [[2, 2], [2, 2]]", OTHER_TID),  # holds no launch
]
# (start, end, correlation, thread) runtime launches; (start, end, correlation, kernel name id) kernels
LAUNCHES = [(3_000, 3_500, 1, TID), (10_500, 11_000, 2, TID), (20_000, 20_500, 3, TID), (13_100, 13_200, 4, TID)]
KERNELS = [(50_000, 60_000, 1, 4), (61_000, 62_000, 2, 5), (63_000, 64_000, 3, 6), (65_000, 66_000, 4, 6)]
# the truth: each kernel's op (innermost op range on the launching thread holding its launch)
KERNEL_OP = {50_000: "aten::addmm", 61_000: "aten::relu", 63_000: None, 65_000: None}
OP_SHAPES = {
    "aten::linear": [[[8, 16], [32, 16], [32]], None, None],
    "aten::t": [[[32, 16]], None, None],
    "aten::addmm": [[[32], [8, 16], [16, 32], [], []], None, None],
    "aten::relu": None,
    "aten::empty": None,
    "aten::mm": [[[2, 2], [2, 2]], None, None],
}


def build(path: Path, ranges=RANGES) -> Path:
    con = sqlite3.connect(path)
    c = con.cursor()
    c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    names = [(1, "cudaLaunchKernel_v7000"), (2, LINEAR), (4, "ampere_sgemm_64x32_tn"), (5, "relu_kernel")]
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [*names, (6, "other_kernel")])
    c.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
    c.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, '')", [(34, "NvtxMark"), (59, "NvtxPushPopRange")])
    c.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,"
        " globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER)"
    )
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0)",
        [(s, e, t, k) for s, e, k, t in LAUNCHES],
    )
    c.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,"
        " streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,"
        " registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER,"
        " blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER)"
    )
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, ?, ?, 32, 4, 1, 1, 128, 1, 1, 0, 0)",
        [(s, e, k, GPID, n, n) for s, e, k, n in KERNELS],
    )
    c.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,"
        " globalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    c.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, ?, 0)",
        [(s, e, None if isinstance(x, int) else x, t, x if isinstance(x, int) else None) for s, e, x, t in ranges],
    )
    c.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER)")
    c.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 132)")
    con.commit()
    con.close()
    return path


@pytest.fixture
def export(tmp_path):
    return build(tmp_path / "ops.sqlite")


def test_parser_reads_pytorchs_nvtx_text():
    texts = [LINEAR, RELU, EMPTY, "train step", "FSDP::pre_forward (blocks.3._checkpoint_wrapped_module)", "a, b"]
    texts += ["FSDP::pre_forward, op_id = 21", "ProfilerStep#3, op_id = 22"]  # record_function scopes
    got = parse_op_texts(texts, rules()["emit_nvtx_op"], rules()["emit_nvtx_op_names"])
    assert got.is_op.tolist() == [True, True, True, False, False, False, False, False]
    assert got.is_scope.tolist() == [False] * 6 + [True, True]
    assert got.op.to_pylist() == ["aten::linear", "aten::relu", "aten::empty", *texts[3:6]] + [
        "FSDP::pre_forward",
        "ProfilerStep#3",
    ]
    assert got.seq.tolist() == [5, 6, -1, -1, -1, -1, -1, -1]
    assert got.op_id.tolist() == [10, 13, 14, -1, -1, -1, 21, 22]
    assert got.sizes.to_pylist() == ["[[8, 16], [32, 16], [32]]", None, None, None, None, None, None, None]
    assert json.loads(shapes_key(got.sizes[0].as_py()).split(b"\0")[0]) == [[8, 16], [32, 16], [32]]
    assert shapes_key(None) is None and shapes_key("[[1, x]]") is None
    empty = parse_op_texts([], rules()["emit_nvtx_op"], rules()["emit_nvtx_op_names"])
    assert empty.is_op.size == 0 and len(empty.op) == 0


def test_op_ranges_are_cpu_ops_with_their_sizes(export):
    t = load(export, cache=False)
    ev = t.events
    ops = ev[ev["kind"] == "cpu_op"]
    assert sorted(ops["name"].astype(str)) == sorted(OP_SHAPES)
    for name, shapes in OP_SHAPES.items():
        got = ops.loc[ops["name"] == name, "shapes"].iloc[0]
        assert (None if got is None or got != got else json.loads(got)) == shapes, name
    # the user range stays an annotation under its own name; every op keeps its range's times and thread
    ann = ev[ev["kind"] == "cpu_annotation"]
    assert ann["name"].astype(str).tolist() == ["train step"]
    want = {(s, e) for s, e, x, _ in RANGES if x != "train step"}
    assert set(zip(ops["start_ns"].tolist(), ops["end_ns"].tolist())) == want
    assert {"cpu_op", "shapes"} <= set(t.meta["profiler"]["recorded"])
    assert t.report.records_read == len(RANGES) + len(LAUNCHES) + len(KERNELS) and not t.report.dropped


def test_kernels_link_to_the_innermost_op_range(export):
    from tracekit.analyses.hardware.kernel_ops import kernel_ops

    t = load(export, cache=False)
    ev = t.events
    ko = kernel_ops(t)
    names = ev["name"].astype(str).to_numpy()
    got = {
        int(ev["start_ns"].iloc[k]): (names[o] if o >= 0 else None) for k, o in zip(ko.krow.tolist(), ko.oprow.tolist())
    }
    assert got == KERNEL_OP


@pytest.mark.slow
def test_kernels_by_op_command(export, cli):
    code, out, err = cli("kernels", export, "--by", "op", "-f", "json", "--no-cache")
    assert code == 0, err
    rows = {r["op"]: r for r in json.loads(out)["tables"]["kernels"]}
    total = {}
    for (s, e, _, _), op in zip(KERNELS, KERNEL_OP.values()):
        total[op or "(no op)"] = total.get(op or "(no op)", 0) + (e - s)
    assert {k: v["total_ns"] for k, v in rows.items()} == total


def test_roofline_says_the_dtypes_are_unknown(export, cli):
    code, _, err = cli("roofline", export, "--hw", "h100", "--no-cache")
    assert code == 4 and "no dtypes" in err and "\n" not in err.strip()


def test_without_op_ranges_the_sentence_names_emit_nvtx(tmp_path, cli):
    p = build(tmp_path / "plain.sqlite", ranges=[(500, 40_000, "train step", TID)])
    t = load(p, cache=False)
    assert not (t.events["kind"] == "cpu_op").any()
    code, _, err = cli("roofline", p, "--hw", "h100", "--no-cache")
    assert code == 4, err
    msg = err.strip()
    assert "nsys profile --trace=cuda,nvtx" in msg and "emit_nvtx(record_shapes=True)" in msg and "\n" not in msg


def test_kineto_wording_unchanged():
    from tracekit.data import record_hint

    assert record_hint({"profiler": {"name": "kineto"}}, "shapes") == "record_shapes=True"
    assert record_hint({}, "shapes") == "record_shapes=True"
    assert "emit_nvtx" in record_hint({"profiler": {"name": "nsys"}}, "ops")


CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus" / "nsys-ai" / "tests" / "fixtures"


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "mfu_2gpu_before.sqlite").exists(), reason="the nsys corpus exports are absent")
def test_corpus_export_op_ranges():
    """The real export (emit_nvtx without record_shapes): its op ranges, counted by an independent sqlite3 query, are
    its cpu_ops; no shapes; most kernels find their op."""
    from tracekit.analyses.hardware.kernel_ops import kernel_ops

    p = CORPUS / "mfu_2gpu_before.sqlite"
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    texts = [
        r[0]
        for r in con.execute(
            "SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS"
            ' WHERE eventType = 59 AND "end" IS NOT NULL'
        )
    ]
    con.close()
    import re

    # an op: a seq, or an op_id and an operator namespace (aten::, c10d::, …); an op_id alone on another name is a
    # record_function scope (FSDP::pre_forward, record_param_comms): a user range, as Kineto records it
    is_op = re.compile(r"^(.+?)(, seq = \d+)?(, op_id = \d+)?$")
    namespaces = re.compile(rules()["emit_nvtx_op_names"])
    want = sum(
        1 for x in texts if (m := is_op.match(x)) and (m.group(2) or (m.group(3) and namespaces.match(m.group(1))))
    )
    scopes = sum(1 for x in texts if (m := is_op.match(x)) and m.group(3) and not m.group(2))
    assert want > 0 and scopes > 0  # the corpus holds both
    t = load(p, cache=False)
    ev = t.events
    assert int((ev["kind"] == "cpu_op").sum()) == want
    assert ev["shapes"].isna().all()
    ko = kernel_ops(t)
    assert (ko.oprow >= 0).mean() > 0.9
    assert not np.any(ev.loc[ev["kind"] == "cpu_op", "name"].astype(str).str.contains("op_id = "))


def test_kernels_by_op_without_op_ranges_says_how_to_record(tmp_path, cli):
    p = build(tmp_path / "plain.sqlite", ranges=[(500, 40_000, "train step", TID)])
    code, out, err = cli("kernels", p, "--by", "op", "-f", "json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["op"] for r in doc["tables"]["kernels"]] == ["(no op)"]
    said = [w for w in doc["warnings"] if "no kernel has a launching CPU op" in w]
    assert len(said) == 1 and "emit_nvtx" in said[0] and "nsys profile --trace=cuda,nvtx" in said[0]
