"""A result records the annotation as -a takes it again (issue 29): a shipped one by its name, a user's copy by the
path it was loaded from — an edited copy that keeps the shipped name is not the shipped one — so the page's
'how these numbers were obtained' command and the findings' 'see' commands rerun what ran."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tracekit
from tracekit.annotation.spec import load_annotation

REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"
SHIPPED = REPO / "annotations" / "k3_dp16.json"


def test_ref_is_the_name_of_a_shipped_one_and_the_path_of_a_copy(tmp_path):
    copy = tmp_path / "mine.json"
    shutil.copy(SHIPPED, copy)
    assert load_annotation("k3_dp16").ref == "k3_dp16"
    assert load_annotation(str(SHIPPED)).ref == "k3_dp16"  # the shipped file itself, by path
    assert load_annotation(str(copy)).ref == str(copy)
    assert json.loads(copy.read_text())["name"] == "k3_dp16"  # the copy shares the shipped name


def test_params_and_commands_name_the_copy(tmp_path, cli, monkeypatch):
    copy = tmp_path / "mine.json"
    shutil.copy(SHIPPED, copy)
    monkeypatch.chdir(tmp_path)
    t = tracekit.load(TRACE, cache=False)
    res = tracekit.findings(t, "mine.json")
    assert res.params["annotation"] == "mine.json"
    assert all("-a k3_dp16" not in c for c in res.tables["findings"]["command"] if c)
    assert any("-a mine.json" in c for c in res.tables["findings"]["command"] if c)
    assert tracekit.report(t, "k3_dp16").params["annotation"] == "k3_dp16"
    code, _, err = cli("report", TRACE, "-a", "mine.json", "--no-cache", "-f", "html", "-o", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "-a mine.json" in page and "-a k3_dp16" not in page
