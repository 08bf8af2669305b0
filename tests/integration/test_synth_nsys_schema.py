"""The generator's nsys SQLite export (fixtures/synthlib/nsys.py) has the tables of a real export with its columns,
in its order, with its types and NOT NULL: every table both hold is compared with a real schema-3.25 export of the
corpus (read-only, through sqlite3, not through tracekit). The enum rows the generator writes are the real
export's rows of the same ids."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fixtures.synthlib.nsys import SCHEMA, write_nsys

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "nsys-ai" / "tests" / "fixtures"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/corpus/nsys-ai/tests/fixtures")
REAL = FIXTURES / "mfu_2gpu_before.sqlite"
pytestmark = pytest.mark.skipif(not REAL.is_file(), reason=f"the nsys corpus ({FIXTURES}) is absent")
ENUMS = ("ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE")


def _columns(path: Path, table: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return [(r[1], r[2], r[3]) for r in con.execute(f'PRAGMA table_info("{table}")')]  # name, type, notnull
    finally:
        con.close()


def _rows(path: Path, table: str) -> set[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return set(con.execute(f'SELECT * FROM "{table}"').fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    trace = {"traceEvents": [], "deviceProperties": [{"id": 0, "name": "GPU", "numSms": 2, "warpSize": 32}]}
    return write_nsys(tmp_path_factory.mktemp("nsys_schema") / "s.sqlite", trace)


def test_tables_have_the_real_columns(written):
    shared = [t for t in SCHEMA if _columns(REAL, t)]
    assert len(shared) >= 14  # every table but TARGET_INFO_GPU, which the corpus exports lack
    for table in shared:
        assert _columns(written, table) == _columns(REAL, table), table


def test_enum_rows_are_the_real_ones(written):
    for table in ENUMS:
        ours = _rows(written, table)
        assert ours and ours <= _rows(REAL, table), table
