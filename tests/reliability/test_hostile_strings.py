"""Hostile strings through every renderer: JSON keeps them exact; the terminal, md, csv and the notebook HTML are
safe (docs/reliability.md, "Hostile strings"). ``H`` in that page is this file.

Examples per CI run (the ``max_examples`` below): 150 + 50 = 200.
"""

from __future__ import annotations

import csv
import html.parser
import io
import json
import re
import unicodedata

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import kernel, write_trace
from tracekit.render import emit
from tracekit.render.csv_text import neutralize, to_csv
from tracekit.render.human import safe_text
from tracekit.render.html import notebook_html as to_html
from tracekit.names import distinct_names
from tracekit.render.terminal import to_text
from tracekit.result import Result, to_json_obj

RENDER_EXAMPLES = 150
CSV_EXAMPLES = 50
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = [
    "[/]",
    "[bold]x[/bold]",
    "void k<float>() [with T = float]",
    "a\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "\x1b[2J\x1b[H",
    "x|y",
    "a\\|b",
    "l1\nl2",
    "cr\rhere",
    "crlf\r\nok",
    "=cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1)",
    "+1",
    "\tlead",
    "\u202eevil",
    "zero\u200bwidth",
    "line\u2028sep",
    "nul\x00x",
    "\x7f\x9b",
    "中文宽字符",
    "e\u0301",
    "",
    " ",
    "\\",
    "*bold* _it_ `code`",
    "<script>alert(1)</script>",
    "&amp;",
]
TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
UNSAFE = ("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn")


def _result(names: list[str], value: str, table: str) -> Result:
    df = pd.DataFrame({"name": names, "total_ns": [1_000_000 * (i + 1) for i in range(len(names))]})
    return Result(
        "kernels",
        [{"path": value}],
        {"match": value},
        {"marker": value, "span_ns": 5_000_000},
        {table: df},
        [f"warning about {value}"],
    )


def _unsafe_chars(text: str, allowed: str = "\n") -> list[str]:
    return [ch for ch in text if ch not in allowed and unicodedata.category(ch) in UNSAFE and ch != "\u200d"]


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.add(tag)

    def handle_data(self, data) -> None:
        self.text.append(data)


@pytest.mark.slow
@settings(max_examples=RENDER_EXAMPLES, **SETTINGS)
@given(names=st.lists(TEXT, min_size=1, max_size=6), value=TEXT, table=TEXT, width=st.sampled_from([80, 100, 160]))
def test_random_strings_through_every_renderer(names, value, table, width):
    r = _result(names, value, table)
    # JSON: exactly the strings given
    doc = json.loads(emit(r, "json"))
    assert doc == json.loads(json.dumps(to_json_obj(r)))
    assert [row["name"] for row in doc["tables"][table]] == names and doc["summary"]["marker"] == value
    assert doc["warnings"] == [f"warning about {value}"]
    # the terminal: nothing that moves the cursor, colours, breaks a row or reorders text; markup stays text
    text = to_text(r, width=width)
    assert _unsafe_chars(text) == []
    lines = text.splitlines()
    rule = max(i for i, ln in enumerate(lines) if ln.startswith("─"))
    rows = lines[rule + 1 :]
    # a long name wraps in its column (issue 29): each row's number is on its first line, in order
    numbered = [ln for ln in rows if re.search(r"\s\d+\.000$", ln)]
    assert len(numbered) == len(names) and all(ln.endswith(f"{i + 1}.000") for i, ln in enumerate(numbered)), rows
    if width == 160:  # every name as the terminal shows it (names.distinct_names), whole across its lines
        flat = "".join("".join(re.sub(r"\s\d+\.000$", "", ln).split()) for ln in rows)
        assert all("".join(safe_text(n).split()) in flat for n in distinct_names(names))
    # md: every row of the pipe table has its three cell borders, no raw line break inside a cell
    md = emit(r, "md")
    assert "\r" not in md and _unsafe_chars(md) == []
    lines = md.splitlines()
    head = lines.index("| name | total ms |")
    body = lines[head + 2 : head + 2 + len(names)]
    assert all(_unescaped_pipes(ln) == 3 for ln in body) and lines[head + 2 + len(names)] == "", body
    assert all(_unescaped_pipes(ln) == 3 for ln in lines[2 : 4 + 2])  # the summary's key / value rows too
    # the notebook: only the tags it writes; the text inside is safe
    written = {
        "div",
        "p",
        "b",
        "code",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "i",
        "ul",
        "li",
        "h1",
        "h2",
        "h3",
        "details",
        "summary",
        "style",
        "span",
        "pre",
        "svg",
        "rect",
        "g",
        "title",
        "text",
        "line",
    }
    p = _Tags()
    p.feed(to_html(r))
    assert p.tags <= written, p.tags - written
    assert _unsafe_chars("".join(p.text)) == []
    # the HTML page: the same, plus its frame and the one sorting script
    p = _Tags()
    p.feed(emit(r, "html"))
    assert p.tags <= written | {"html", "head", "meta", "body", "main", "script"}, p.tags - written
    assert _unsafe_chars("".join(p.text)) == []


@settings(max_examples=CSV_EXAMPLES, **SETTINGS)
@given(names=st.lists(TEXT, min_size=1, max_size=8))
def test_csv_neutralises_formulas_and_controls_and_raw_is_exact(names):
    r = _result(names, "v", "kernels")
    rows = list(csv.reader(io.StringIO(to_csv(r, None), newline="")))
    assert rows[0] == ["name", "total_ns"] and len(rows) == len(names) + 1
    cells = [row[0] for row in rows[1:]]
    assert cells == [neutralize(n) for n in names]
    assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells)
    assert all(_unsafe_chars(c, allowed="\n\t\r") == [] for c in cells)
    assert all("\r" not in c.replace("\r\n", "") for c in cells)  # a bare CR would end the row in a spreadsheet
    assert [row[1] for row in rows[1:]] == [str(1_000_000 * (i + 1)) for i in range(len(names))]  # numbers untouched
    raw = list(csv.reader(io.StringIO(to_csv(r, None, raw=True), newline="")))
    assert [row[0] for row in raw[1:]] == names


# --------------------------------------------------------------------------- the catalogue, through the CLI

CATALOGUE = [
    "[/]",
    "[bold]x[/bold]",
    "gemm [with T = float]",
    "a\x1b[31mred\x1b[0m",
    "x|y",
    "cr\rhere",
    '=HYPERLINK("http://x")',
    "-1+2",
    "@SUM(A1)",
    "+cmd",
    "\u202eevil",
]


@pytest.fixture
def hostile_trace(tmp_path):
    evs = [kernel(n, 100.0 + 10 * i, 5.0 + i, corr=i + 1) for i, n in enumerate(CATALOGUE)]
    return write_trace(tmp_path / "hostile.json", evs)


def test_markup_names_are_shown_as_written(cli, hostile_trace):
    code, out, err = cli("kernels", hostile_trace, "--no-cache")
    assert code == 0, err
    for name in ("[/]", "[bold]x[/bold]", "gemm [with T = float]"):
        assert name in out, name  # rich markup neither crashes nor swallows them


def test_escape_sequences_never_reach_the_terminal(cli, hostile_trace):
    for fmt in ("table", "md", "csv"):
        code, out, err = cli("kernels", hostile_trace, "--no-cache", "--format", fmt)
        assert code == 0, err
        assert "\x1b" not in out and "\u202e" not in out and "\r" not in out.replace("\r\n", ""), fmt
        assert "\\x1b[31m" in out and "\\u202e" in out, fmt


def test_json_keeps_every_name_exact(cli, hostile_trace):
    code, out, _ = cli("kernels", hostile_trace, "--no-cache", "--format", "json")
    assert code == 0
    assert sorted(r["name"] for r in json.loads(out)["tables"]["kernels"]) == sorted(CATALOGUE)


def test_csv_neutralises_formula_prefixes_unless_raw(cli, hostile_trace, monkeypatch):
    code, out, _ = cli("kernels", hostile_trace, "--no-cache", "--format", "csv")
    names = {row["name"] for row in csv.DictReader(io.StringIO(out, newline=""))}
    assert {'\'=HYPERLINK("http://x")', "'-1+2", "'@SUM(A1)", "'+cmd", "cr\\rhere"} <= names
    monkeypatch.setenv("TRACEKIT_CSV_RAW", "1")
    code, out, _ = cli("kernels", hostile_trace, "--no-cache", "--format", "csv")
    assert {row["name"] for row in csv.DictReader(io.StringIO(out, newline=""))} == set(CATALOGUE)


def test_markdown_rows_survive_pipes_and_bare_carriage_returns(cli, hostile_trace):
    code, out, _ = cli("kernels", hostile_trace, "--no-cache", "--format", "md")
    body = out.split("### kernels", 1)[1].split("\n\n")[1].splitlines()
    header_pipes = _unescaped_pipes(body[0])
    assert len(body) == 2 + len(CATALOGUE) and all(_unescaped_pipes(ln) == header_pipes for ln in body)
    assert "x\\|y" in out


def test_warnings_on_stderr_are_safe(capsys):
    from tracekit.cli.common import Fmt, _output

    _output(_result(["k"], "\x1b[2J[/]", "t"), Fmt.json, None, None)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "warning about \\x1b[2J[/]" in err


def test_example_budget_is_stated():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert re.search(rf"\b{RENDER_EXAMPLES + CSV_EXAMPLES}\b hypothesis examples of random strings", doc)
