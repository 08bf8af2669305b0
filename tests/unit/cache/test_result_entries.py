"""`report` and `findings` run again with the same inputs take their Result from the cache (issue 30): the same
document, no analysis run; anything the Result depends on — an option, the trace's bytes, the annotation's content,
a file it reads, tracekit's own code — changed means the analyses run again; a damaged, foreign or untrusted entry
is recomputed, never fatal; --no-cache neither reads nor writes one; `cache info|clear` list and remove them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import tracekit.analyses.findings.trace_findings as findings_mod
import tracekit.analyses.report.trace_report as report_mod
from tracekit.cli.common import bundled_sample
from tracekit.cache import result_entries, reuse_key
from tracekit.cache.result_entries import entry_path
from tests.conftest import comparable_doc

SAMPLE = bundled_sample()
SHIPPED = Path(__file__).resolve().parents[3] / "annotations" / "decode_sample.json"


@pytest.fixture
def calls(monkeypatch):
    """How many times report() and findings() really ran."""
    n = {"report": 0, "findings": 0}
    real_report, real_findings = report_mod.report, findings_mod.findings

    def counted(name, real):
        def run(*a, **k):
            n[name] += 1
            return real(*a, **k)

        return run

    monkeypatch.setattr(report_mod, "report", counted("report", real_report))
    monkeypatch.setattr(findings_mod, "findings", counted("findings", real_findings))
    return n


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "t.json.gz"
    shutil.copyfile(SAMPLE, p)
    return p


def test_the_same_report_again_is_read_not_computed(cli, calls, trace):
    code, first, _ = cli("report", trace, "-a", "decode_sample", "-f", "json")
    assert code == 0 and calls["report"] == 1
    code, again, err = cli("report", trace, "-a", "decode_sample", "-f", "json")
    assert code == 0 and calls["report"] == 1, "the second run must not analyse"
    assert comparable_doc(again) == comparable_doc(first)
    assert json.loads(again)["inputs"][0]["from_cache"] is True
    code, md, _ = cli("report", trace, "-a", "decode_sample", "-f", "md")  # another format: the same Result
    assert code == 0 and calls["report"] == 1 and "|" in md


@pytest.mark.slow
@pytest.mark.parametrize("change", ["option", "trace_bytes", "annotation", "code", "device"])
def test_whatever_the_result_depends_on_changed_computes_again(cli, calls, trace, tmp_path, change, monkeypatch):
    ann = tmp_path / "mine.json"
    ann.write_text(SHIPPED.read_text())
    args = ["report", trace, "-a", ann, "-f", "json"]
    code, first, _ = cli(*args)
    assert code == 0 and calls["report"] == 1
    if change == "option":
        args += ["--min-step-ms", "0.5"]
    elif change == "trace_bytes":  # the same size and mtime: the checksum and ctime catch it
        st = os.stat(trace)
        data = bytearray(trace.read_bytes())
        data[4] ^= 0xFF  # the gzip header's MTIME: a different file, the same events
        trace.write_bytes(bytes(data))
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "annotation":
        doc = json.loads(ann.read_text())
        doc["description"] = doc.get("description", "") + " (edited)"
        ann.write_text(json.dumps(doc))
    elif change == "code":
        monkeypatch.setattr(reuse_key, "_fingerprint", "another tracekit")
    elif change == "device":
        args = ["--device", "0", *args]
    code, again, err = cli(*args)
    assert code == 0, err
    assert calls["report"] == 2, f"{change}: the Result must be computed again"
    if change == "option":
        assert json.loads(again)["params"]["min_step_ns"] == 500_000


def test_findings_again_is_read_and_its_options_are_in_the_key(cli, calls, trace):
    assert cli("findings", trace, "-f", "json")[0] == 0
    code, again, _ = cli("findings", trace, "-f", "json")
    assert code == 0 and calls["findings"] == 1
    code, other, _ = cli("findings", trace, "-f", "json", "--min-ms", "2")
    assert code == 0 and calls["findings"] == 2
    assert json.loads(other)["params"] != json.loads(again)["params"]


def test_no_cache_neither_reads_nor_writes_an_entry(cli, calls, trace):
    assert cli("report", trace, "--no-cache", "-f", "json")[0] == 0
    assert not entry_path(trace, "report").exists()
    assert cli("report", trace, "-f", "json")[0] == 0
    assert cli("report", trace, "--no-cache", "-f", "json")[0] == 0
    assert calls["report"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "garbage", "group_writable", "another_key"])
def test_a_bad_entry_is_recomputed_never_fatal(cli, calls, trace, damage):
    code, first, _ = cli("report", trace, "-f", "json")
    entry = entry_path(trace, "report")
    assert code == 0 and entry.exists()
    data = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(result_entries.MAGIC + b"{not json\n" + os.urandom(64))
    elif damage == "group_writable":
        os.chmod(entry, 0o664)
    elif damage == "another_key":
        head_end = data.index(b"\n", len(result_entries.MAGIC))
        head = json.loads(data[len(result_entries.MAGIC) : head_end])
        head["key"]["options"]["steps"]["min_step_ns"] += 1
        entry.write_bytes(result_entries.MAGIC + json.dumps(head).encode() + data[head_end:])
    code, again, err = cli("report", trace, "-f", "json")
    assert code == 0 and "Traceback" not in err
    assert calls["report"] == 2
    assert comparable_doc(again) == comparable_doc(first)


def test_cache_info_lists_result_entries_and_clear_removes_them(cli, trace):
    assert cli("report", trace)[0] == 0
    code, out, _ = cli("cache", "info", "-f", "json")
    rows = json.loads(out)["tables"]["entries"]
    assert sorted(r["holds"] for r in rows) == ["events", "report result"]
    assert json.loads(out)["summary"]["other_files"] == 0
    code, out, _ = cli("cache", "clear", "-f", "json")
    assert code == 0 and json.loads(out)["summary"]["removed"] == 2
    assert not entry_path(trace, "report").exists()


def test_cache_info_shows_a_source_whose_name_is_not_utf8(cli, tmp_path):
    """An entry of a trace at a path with a byte that is not UTF-8 is listed with it as \\xNN (it was a crash)."""
    folder = tmp_path / os.fsdecode(b"d\xff")
    folder.mkdir()
    p = folder / "t.json.gz"
    shutil.copyfile(SAMPLE, p)
    assert cli("info", p)[0] == 0
    code, out, err = cli("cache", "info", "-f", "json")
    assert code == 0, err
    assert any("\\xff" in r["source"] for r in json.loads(out)["tables"]["entries"])


def test_a_killed_result_write_is_removed_once_stale_and_a_recent_one_is_left(cli, trace, tmp_path):
    cache = Path(os.environ["TRACEKIT_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    old, new = cache / ".tmp-tracekit-1-abcdefgh.result", cache / ".tmp-tracekit-2-ijklmnop.result"
    for p in (old, new):
        p.write_bytes(result_entries.MAGIC + b"{}\n")
    os.utime(old, (1, 1))  # not touched for far longer than tempfiles.STALE_TMP_S
    code, out, _ = cli("cache", "info", "-f", "json")
    assert json.loads(out)["summary"]["temporary_files"] == 2
    assert cli("report", trace)[0] == 0  # the write of its Result cleans up
    assert not old.exists() and new.exists()
