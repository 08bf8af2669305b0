"""Result.save writes what the CLI's -o writes, byte for byte: one renderer object per format owns its file writing
(tracekit/render/formats.py), and both the CLI (cli.common._output) and Result.save call it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tracekit
from tracekit.cli.common import bundled_sample
from tracekit.errors import OutputError, UsageError
from tracekit.render import FORMATS, RENDERERS, SUFFIXES, emit, format_of, renderer


@pytest.fixture(scope="module")
def info():
    """``tracekit info`` of the bundled sample through the API (the CLI's ``info --no-cache`` gives the same)."""
    return tracekit.info(tracekit.load(bundled_sample(), cache=False))


def _files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "fmt, name, save_format",
    [
        ("json", "out.json", None),
        ("csv", "out.csv", None),  # a suffix: one file, the first table
        ("csv", "out", "csv"),  # no suffix: a folder of one file per table
        ("md", "out.md", None),
        ("html", "out.html", None),  # the page and its json sidecar out.json
        ("table", "out.txt", None),
    ],
)
def test_save_writes_what_the_cli_writes(cli, tmp_path, monkeypatch, info, fmt, name, save_format):
    monkeypatch.chdir(tmp_path)  # the page shows paths relative to where it was made: the same place for both
    (tmp_path / "cli").mkdir()
    (tmp_path / "api").mkdir()
    code, out, err = cli("info", "--no-cache", "-f", fmt, "-o", Path("cli") / name)
    assert code == 0, err
    assert out == ""
    written = info.save(Path("api") / name, save_format)
    cli_files, api_files = _files(tmp_path / "cli"), _files(tmp_path / "api")
    assert cli_files == api_files
    made = {Path("api") / f for f in api_files if not f.endswith(".tracekit.lock")}  # a folder keeps its lock file
    assert made == {Path(p) for p in written}
    if fmt == "html":
        assert sorted(api_files) == ["out.html", "out.json"]
        doc = json.loads(api_files["out.json"])  # the sidecar: the json document, its paths as the page shows them
        assert doc == json.loads(info.to_json()) | {"inputs": doc["inputs"]}
        # issue 41: no absolute path; the file name where a relative path would climb to the root or above home,
        # else the path from the page's folder (a checkout under /tmp, beside pytest's folders, gives one)
        for shown, given in zip((i["path"] for i in doc["inputs"]), (i["path"] for i in info.inputs)):
            assert not Path(shown).is_absolute(), shown
            assert shown == Path(given).name or (tmp_path / "api" / shown).resolve() == Path(given).resolve(), shown
    elif save_format == "csv":
        assert len(written) == 1 + len(info.tables)  # the summary and every table
    else:
        assert list(api_files) == [name]


def test_the_format_comes_from_the_suffix(info, tmp_path):
    assert {s: format_of(tmp_path / f"x{s}") for s in SUFFIXES} == SUFFIXES
    assert info.save(tmp_path / "x.md") == [tmp_path / "x.md"]
    assert (tmp_path / "x.md").read_text() == emit(info, "md")
    with pytest.raises(UsageError, match="cannot tell the format"):
        info.save(tmp_path / "x.parquet")
    with pytest.raises(UsageError, match="unknown format"):
        info.save(tmp_path / "x.json", "yaml")
    assert not (tmp_path / "x.json").exists()


def test_save_takes_the_cli_options(info, tmp_path):
    (tmp_path / "one").mkdir()
    info.save(tmp_path / "one", "csv", table="by_stream")  # --table into a folder: that table alone
    assert [p.name for p in (tmp_path / "one").iterdir() if p.suffix == ".csv"] == ["info.by_stream.csv"]
    info.save(tmp_path / "two", "csv", table="by_stream")  # --table and no suffix: that table as one file
    assert (tmp_path / "two").read_text() == emit(info, "csv", table="by_stream")
    info.save(tmp_path / "all.md", all_rows=True, wide=True)
    assert (tmp_path / "all.md").read_text() == emit(info, "md", all_rows=True, wide=True)


def test_save_never_writes_over_an_input(tmp_path):
    trace = tmp_path / "t.json.gz"
    shutil.copy(bundled_sample(), trace)
    before = trace.read_bytes()
    res = tracekit.info(tracekit.load(trace, cache=False))
    with pytest.raises(OutputError, match="is an input"):
        res.save(trace, "json")
    assert trace.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.json.gz"]  # no temporary file left behind


def test_one_renderer_per_format(info):
    assert FORMATS == ("table", "json", "csv", "md", "html") == tuple(RENDERERS)
    for fmt in FORMATS:
        r = renderer(fmt, width=100)
        assert r.name == fmt
        assert "".join(r.pieces(info)) == r.text(info) == emit(info, fmt, width=100)
    with pytest.raises(ValueError, match="unknown format"):
        emit(info, "yaml")
