"""Every command's `--format json`, streamed a few rows at a time (tracekit.result.iter_json: each chunk's rows
written column by column, issue 28), is byte for byte the document the encoders write from row dicts in one piece —
on the fixtures of the parity test, indented and compact."""

from __future__ import annotations

import pytest
from test_parity import _cases, data  # noqa: F401  (data: the parity test's fixture traces, a pytest fixture)

import tracekit.result as result_mod
from tracekit.result import encode_json, iter_json, to_json_obj

pytestmark = pytest.mark.slow  # every command on the fixtures: the slow tier


def test_every_commands_json_is_the_row_dict_document(data, monkeypatch):  # noqa: F811
    built = []
    rows_text = result_mod._rows_text
    monkeypatch.setattr(result_mod, "_rows_text", lambda *a: built.append(rows_text(*a)) or built[-1])
    streamed_rows = 0
    for command, _args, api in _cases(data):
        r = api()
        for indent in (2, None):
            whole = encode_json(to_json_obj(r), indent)
            for chunk in (1, 3, 1000):
                assert "".join(iter_json(r, indent, chunk_rows=chunk)) == whole, (command, indent, chunk)
        streamed_rows += sum(len(df) for df in r.tables.values() if len(df.columns))
    assert streamed_rows > 1000  # the tables were not all empty
    assert sum(t is not None for t in built) > 0.9 * len(built)  # nearly every chunk was written column-wise
