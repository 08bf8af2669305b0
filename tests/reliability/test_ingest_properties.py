"""Issue 11, trace side: property-based ingest tests (hypothesis).

Random record lists — valid events of every kind, metadata, flows, counters and every kind of unusable record,
with names drawn from all of Unicode — are written as JSON in each layout and compression, then ingested:

* every record is accounted for (kept, not an event, or dropped for the right reason);
* per-kind event counts and duration sums, and every start time, come back exactly;
* a random cut keeps exactly the full trace's events among the records read, or refuses in one sentence;
* the streaming reader, fed blocks of any size, agrees with the whole-document reader.

Examples per CI run (the ``max_examples`` below): 200 + 150 + 100 = 450.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass

import pandas as pd
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.data import load_classes
from tracekit.errors import TracekitError
from tracekit.ingest.kineto.document import decode_slices, split_document
from tracekit.ingest.kineto.stream import decode_stream
from tracekit.ingest.normalize import build_events

ROUNDTRIP_EXAMPLES = 200
TRUNCATION_EXAMPLES = 150
STREAM_EXAMPLES = 100
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

CLASSES = load_classes()
CATS = [
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_runtime",
    "cuda_driver",
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_sync",
    "Trace",
    "mystery_cat",
]
NAMES = st.one_of(
    st.text(max_size=24),
    st.sampled_from(
        [
            'quoted \\"x\\" ]}',
            "trailing backslash \\",
            "},\n  {",
            "NaN",
            "x: NaN, y: -Infinity",
            "\\ud800 as text",
            "ncclDevKernel_AllGather_RING_LL",
            "Memcpy PtoP (Device -> Device)",
        ]
    ),
)
MAX_TS_NS = 4 * 10**18  # epoch-scale µs in ns, well inside int64 once a duration is added
MAX_DUR_NS = 10**13


@dataclass(frozen=True)
class Rec:
    """One record's JSON text and what ingest must make of it."""

    text: str
    outcome: str  # "kept", "not_event" or "dropped"
    reason: str = ""
    kind: str = ""
    start_ns: int = 0
    dur_ns: int = 0
    name: str = ""
    nonfinite_literal: bool = False


def us_text(ns: int, style: int) -> str:
    """ns as µs text: three decimals, as few as needed, or a quoted string."""
    sign, ns = ("-" if ns < 0 else ""), abs(ns)
    full = f"{sign}{ns // 1000}.{ns % 1000:03d}"
    if style == 1:
        full = full.rstrip("0").rstrip(".")
    return f'"{full}"' if style == 2 else full


def dumps(obj: dict, raw: dict[str, str]) -> str:
    """JSON for ``obj`` with the values of ``raw`` spliced in verbatim (unquoted numbers, NaN)."""
    text = json.dumps({**obj, **{k: f"@@{k}@@" for k in raw}}, ensure_ascii=False)
    for k, v in raw.items():
        text = text.replace(f'"@@{k}@@"', v, 1)
    return text


@st.composite
def records(draw) -> Rec:
    pick = draw(
        st.sampled_from(
            ["X"] * 8
            + [
                "i",
                "M",
                "flow",
                "C",
                "no_ts",
                "bad_ts",
                "no_dur",
                "neg_dur",
                "nan_dur",
                "huge_dur",
                "bad_ph",
                "BE",
                "not_object",
            ]
        )
    )
    name = draw(NAMES)
    cat = draw(st.sampled_from(CATS))
    ts = draw(st.integers(0, MAX_TS_NS))
    ts_style = draw(st.sampled_from([0, 0, 1, 2]))
    dur = draw(st.integers(0, MAX_DUR_NS))
    base = {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": draw(st.integers(0, 2**31)),
        "tid": draw(st.integers(-(2**31), 2**31)),
    }
    if draw(st.booleans()):
        base["args"] = {
            "device": draw(st.integers(0, 7)),
            "stream": draw(st.integers(0, 64)),
            "correlation": draw(st.integers(0, 2**40)),
        }
    tsr = us_text(ts, ts_style)
    if pick == "X":
        return Rec(
            dumps(base, {"ts": tsr, "dur": us_text(dur, draw(st.sampled_from([0, 1])))}),
            "kept",
            kind=CLASSES.kind_for_cat(cat),
            start_ns=ts,
            dur_ns=dur,
            name=name,
        )
    if pick == "i":
        return Rec(dumps({**base, "ph": "i", "s": "g"}, {"ts": tsr}), "kept", kind="instant", start_ns=ts, name=name)
    if pick == "M":
        return Rec(
            json.dumps({"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": name}}),
            "not_event",
            "metadata record (ph 'M')",
        )
    if pick == "flow":
        ph = draw(st.sampled_from("sft"))
        return Rec(
            dumps({"ph": ph, "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 1}, {"ts": tsr}),
            "not_event",
            f"flow record (ph '{ph}')",
        )
    if pick == "C":
        return Rec(
            dumps({"ph": "C", "name": name, "pid": 0, "args": {"v": 1}}, {"ts": tsr}),
            "not_event",
            "counter record (ph 'C')",
        )
    if pick == "no_ts":
        return Rec(dumps(base, {"dur": us_text(dur, 0)}), "dropped", "event without a usable 'ts'")
    if pick == "bad_ts":
        return Rec(
            dumps({**base, "ts": draw(st.sampled_from(["", "abc", "1.2.3", "0x10"]))}, {"dur": "1.0"}),
            "dropped",
            "event without a usable 'ts'",
        )
    if pick == "no_dur":
        return Rec(dumps(base, {"ts": tsr}), "dropped", "complete event without 'dur'")
    if pick == "neg_dur":
        return Rec(
            dumps(base, {"ts": tsr, "dur": us_text(-draw(st.integers(1, MAX_DUR_NS)), 0)}),
            "dropped",
            "complete event with a negative 'dur'",
        )
    if pick == "nan_dur":
        return Rec(
            dumps(base, {"ts": tsr, "dur": draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))}),
            "dropped",
            "complete event with a non-finite 'dur'",
            nonfinite_literal=True,
        )
    if pick == "huge_dur":
        return Rec(
            dumps(base, {"ts": tsr, "dur": "1e17"}),
            "dropped",
            "event whose 'dur' or end lies beyond the int64 nanosecond range",
        )
    if pick == "bad_ph":
        obj = {k: v for k, v in base.items() if k != "ph"} | ({"ph": "Q"} if draw(st.booleans()) else {})
        return Rec(dumps(obj, {"ts": tsr, "dur": "1.0"}), "dropped", "record with an unsupported or missing phase 'ph'")
    if pick == "BE":
        return Rec(
            dumps({**base, "ph": draw(st.sampled_from("BE"))}, {"ts": tsr}),
            "dropped",
            "begin/end or async record (ph B/E/b/e/n) not paired by tracekit",
        )
    value = draw(st.sampled_from(['"text"', "5", "null", "[1, 2]", "true"]))
    return Rec(value, "dropped", "record with an unsupported or missing phase 'ph'")


LAYOUTS = ["kineto", "oneline", "minified", "array"]


def document(recs: list[Rec], layout: str) -> bytes:
    texts = [r.text for r in recs]
    if layout == "array":
        return ("[\n" + ",\n".join(texts) + "\n]").encode()
    sep = {"kineto": ",\n  ", "oneline": ",\n", "minified": ","}[layout]
    return (
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "numSms": 148}],\n  "traceEvents": [\n  '
        + sep.join(texts)
        + '\n  ],\n  "baseTimeNanoseconds": 1700000000000000000\n}'
    ).encode()


def compress(data: bytes, codec: str) -> bytes:
    if codec == "gz":
        return gzip.compress(data, mtime=0)
    if codec == "zst":
        return zstandard.ZstdCompressor().compress(data)
    return data


_counter = itertools.count()


def write(tmp_path, data: bytes, codec: str):
    path = tmp_path / f"t{next(_counter)}.json{'.' + codec if codec != 'none' else ''}"
    path.write_bytes(data)
    return path


def accounted(report) -> None:
    assert report.records_read == report.events_kept + sum(report.not_events.values()) + sum(report.dropped.values())


# --------------------------------------------------------------------------- round trip


@pytest.mark.slow
@settings(max_examples=ROUNDTRIP_EXAMPLES, **SETTINGS)
@given(
    recs=st.lists(records(), max_size=40),
    layout=st.sampled_from(LAYOUTS),
    codec=st.sampled_from(["none", "none", "gz", "zst"]),
)
def test_random_records_round_trip(recs, layout, codec, tmp_path):
    path = write(tmp_path, compress(document(recs, layout), codec), codec)
    kept = [r for r in recs if r.outcome == "kept"]
    if not kept:
        with pytest.raises(TracekitError) as exc:
            tracekit.load(path, cache=False)
        assert exc.value.exit_code == 3 and str(path) in str(exc.value) and "\n" not in str(exc.value)
        return
    t = tracekit.load(path, cache=False)
    r = t.report
    accounted(r)
    # a group far before or after the rest (a clock that jumped) is set aside by the one clock-outlier rule
    # (docs/ingest.md): counted as dropped "clock jump …", at an end of the timeline, >= 10 s from the rest
    jumped = sum(n for reason, n in r.dropped.items() if reason.startswith("clock jump"))
    dropped = {k: n for k, n in r.dropped.items() if not k.startswith("clock jump")}
    assert r.records_read == len(recs) and r.events_kept + jumped == len(kept) and not r.salvaged
    assert r.not_events == dict(Counter(x.reason for x in recs if x.outcome == "not_event"))
    assert dropped == dict(Counter(x.reason for x in recs if x.outcome == "dropped"))
    ev = t.events
    if jumped:
        left = sorted(Counter((x.start_ns, x.dur_ns, x.name) for x in kept).elements())
        have = Counter(zip(ev["start_ns"].tolist(), ev["dur_ns"].tolist(), ev["name"].astype(str).tolist()))
        gone = list((Counter(left) - have).elements())
        assert len(gone) == jumped
        lo, hi = int(ev["start_ns"].min()), int(ev["end_ns"].max())
        assert all(g[0] + g[1] <= lo - 10**10 or g[0] >= hi + 10**10 for g in gone), (gone, lo, hi)
        kept = [x for x in kept if (x.start_ns, x.dur_ns, x.name) not in set(gone)]
    got_kinds = ev.groupby(ev["kind"].astype(str))["dur_ns"].agg(["size", "sum"])
    want = pd.DataFrame({"kind": [x.kind for x in kept], "dur_ns": [x.dur_ns for x in kept]})
    want_kinds = want.groupby("kind")["dur_ns"].agg(["size", "sum"])
    assert got_kinds.sort_index().to_dict() == want_kinds.sort_index().to_dict()
    assert sorted(zip(ev["start_ns"].tolist(), ev["dur_ns"].tolist(), ev["name"].astype(str).tolist())) == sorted(
        (x.start_ns, x.dur_ns, x.name) for x in kept
    )
    assert ev["start_ns"].is_monotonic_increasing
    if any(x.nonfinite_literal for x in recs):
        assert any("NaN/Infinity literal" in w for w in r.warnings)


# --------------------------------------------------------------------------- truncation


@pytest.mark.slow
@settings(max_examples=TRUNCATION_EXAMPLES, **SETTINGS)
@given(
    recs=st.lists(records(), min_size=1, max_size=30),
    layout=st.sampled_from(LAYOUTS),
    codec=st.sampled_from(["none", "none", "gz"]),
    where=st.floats(0.0, 1.0),
)
def test_random_cut_keeps_a_prefix_or_refuses(recs, layout, codec, where, tmp_path):
    text = document(recs, layout)
    if not any(r.outcome == "kept" for r in recs):
        recs = recs + [Rec(dumps({"ph": "X", "cat": "kernel", "name": "k"}, {"ts": "1.0", "dur": "1.0"}), "kept")]
        text = document(recs, layout)
    full = tracekit.load(write(tmp_path, text, "none"), cache=False)
    data = compress(text, codec)
    cut = data[: min(len(data) - 1, int(len(data) * where))]
    path = write(tmp_path, cut, codec)
    try:
        t = tracekit.load(path, cache=False)
    except TracekitError as exc:
        assert exc.exit_code == 3 and str(path) in str(exc) and "\n" not in str(exc)
        return
    accounted(t.report)
    assert t.report.salvaged and t.report.records_read <= full.report.records_read
    expected = full.events[full.events["event_id"] < t.report.records_read]
    pd.testing.assert_frame_equal(
        t.events.astype(object).reset_index(drop=True), expected.astype(object).reset_index(drop=True)
    )


# --------------------------------------------------------------------------- streaming = whole document


def _table(cols):
    df, reasons, lanes = build_events(cols)
    return df, reasons, lanes, cols.n, cols.header.get("baseTimeNanoseconds")


@pytest.mark.slow
@settings(max_examples=STREAM_EXAMPLES, **SETTINGS)
@given(
    recs=st.lists(records().filter(lambda r: not r.nonfinite_literal), min_size=1, max_size=40),
    layout=st.sampled_from(["kineto", "oneline", "array"]),
    block=st.integers(1, 4096),
    piece=st.integers(1, 4096),
)
def test_streaming_in_any_block_size_equals_the_whole_document_reader(recs, layout, block, piece):
    """Blocks of any size, gathered into pieces of any size: the table of the whole-document reader."""
    text = document(recs, layout)
    raws, header = split_document("t", text)
    ref = _table(decode_slices(raws, header))
    got = _table(decode_stream(iter([text[i : i + block] for i in range(0, len(text), block)]), piece_target=piece))
    assert got[0].equals(ref[0])
    assert got[1:] == ref[1:]
    assert ref[3] == len(recs)
    # what the one clock-outlier rule set aside (docs/ingest.md) is counted among the reasons, not kept
    jumped = sum(n for reason, n in ref[1].items() if reason.startswith("clock jump"))
    kept = Counter(r.start_ns for r in recs if r.outcome == "kept")
    have = Counter(ref[0]["start_ns"].tolist())
    assert not have - kept and sum((kept - have).values()) == jumped


def test_example_budget_is_stated():
    """docs/reliability.md and issue 11 quote this number; keep them in step."""
    from pathlib import Path

    total = ROUNDTRIP_EXAMPLES + TRUNCATION_EXAMPLES + STREAM_EXAMPLES
    doc = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert re.search(rf"\b{total}\b hypothesis examples", doc), total
