"""The cache's file format (issue 18; format 5 since issue 26): uncompressed Arrow IPC. The same table comes back as ingest makes it,
dtypes and categories included; an entry of an older format (a parquet file, or a key with another format number) is
never used, only rebuilt; a damaged file is rebuilt without an error; a loaded Trace does not keep the file mapped."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracekit
from tests.conftest import kernel, memcpy, write_trace
from tracekit.cache import integrity
from tracekit.cache import trace_entries as _cache
from tracekit.cache import keys as cache_key
from tracekit.cache.admin import cache_clear, cache_info

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"


def _assert_same_table(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        assert a[col].dtype == b[col].dtype, col  # a CategoricalDtype compares its categories and their dtype
        if isinstance(a[col].dtype, pd.CategoricalDtype):
            assert a[col].cat.categories.dtype == b[col].cat.categories.dtype, col
            assert a[col].cat.codes.dtype == b[col].cat.codes.dtype, col
    assert type(a.index) is type(b.index) and a.index.equals(b.index)
    pd.testing.assert_frame_equal(a, b, check_exact=True, check_categorical=True)


def _small(tmp_path: Path) -> Path:
    # every categorical column all-null but name/cat/kind: the case an Arrow round trip can lose the dtype of
    return write_trace(tmp_path / "s.json", [kernel("k", 1.0, 1.0), kernel("k2", 3.0, 1.0)])


@pytest.mark.parametrize("fixture", ["dp16_bs4.trace.json.gz", None])
def test_the_cached_table_is_the_ingested_one_dtypes_included(tmp_path, fixture):
    if fixture:
        src = tmp_path / fixture
        shutil.copy(SYN / fixture, src)
    else:
        src = write_trace(
            tmp_path / "m.json",
            [
                kernel("k", 1.0, 1.0),
                memcpy("Memcpy HtoD (Pageable -> Device)", 3.0, 1.0),
                kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage)", 5.0, 2.0),
            ],
        )
    cdir = tmp_path / "cache"
    cold = tracekit.load(src, cache=False)
    first = tracekit.load(src, cache_dir=cdir)
    again = tracekit.load(src, cache_dir=cdir)
    assert (first.report.from_cache, again.report.from_cache) == (False, True)
    _assert_same_table(cold.events, again.events)
    assert again.meta == cold.meta
    report, cold_report = again.report.to_dict(), cold.report.to_dict()
    assert report.pop("from_cache") is True and cold_report.pop("from_cache") is False
    assert report == cold_report
    entry = _cache.cache_path(src, cdir)
    assert entry.suffix == ".arrow" and entry.exists()
    with pa.memory_map(str(entry)) as f:  # what is on disk: Arrow IPC without compression, then the seal
        reader = pa.ipc.open_file(f, footer_offset=entry.stat().st_size - integrity.TRAILER_SIZE)
        assert reader.num_record_batches >= 1
        assert json.loads(reader.schema.metadata[b"tracekit"])["key"]["format"] == cache_key.CACHE_FORMAT == 9


def test_all_null_categoricals_keep_their_dtype(tmp_path):
    p = _small(tmp_path)
    cold = tracekit.load(p, cache=False)
    assert cold.events["collective"].isna().all()
    tracekit.load(p)
    again = tracekit.load(p)
    assert again.report.from_cache
    _assert_same_table(cold.events, again.events)


def test_an_entry_of_another_format_is_rebuilt_not_used(tmp_path, monkeypatch):
    p = _small(tmp_path)
    monkeypatch.setattr(cache_key, "CACHE_FORMAT", 4)
    assert _cache.write(p, tracekit.load(p, cache=False)) is not None
    monkeypatch.setattr(cache_key, "CACHE_FORMAT", 5)
    assert _cache.read(p) is None  # same file name, an older format number in its key: a miss
    assert tracekit.load(p).report.from_cache is False
    assert tracekit.load(p).report.from_cache is True


def test_a_legacy_parquet_entry_is_never_read_listed_then_removed(tmp_path):
    """A format-3 entry (lz4 parquet) holding a wrong table under a key that would match today: never misread."""
    p = _small(tmp_path)
    cdir = tmp_path / "cache"
    cdir.mkdir()
    wrong = tracekit.load(p, cache=False).events.iloc[:1]
    table = pa.Table.from_pandas(wrong, preserve_index=False)
    report = tracekit.load(p, cache=False).report.to_dict()
    legacy_key = {**cache_key.key_of(p), "format": 3}
    table = table.replace_schema_metadata(
        {**table.schema.metadata, b"tracekit": json.dumps({"key": legacy_key, "meta": {}, "report": report}).encode()}
    )
    legacy = _cache.cache_path(p, cdir, ".parquet")
    pq.write_table(table, legacy, compression="lz4")
    info = cache_info(cdir).tables["entries"]
    assert info["format"].tolist() == [3] and info["file"].tolist() == [legacy.name]
    t = tracekit.load(p, cache_dir=cdir)
    assert t.report.from_cache is False and len(t.events) == 2
    assert not legacy.exists()  # replaced by the format-4 entry
    info = cache_info(cdir).tables["entries"]
    assert info["format"].tolist() == [cache_key.CACHE_FORMAT] and info["file"].tolist() == [
        _cache.cache_path(p, cdir).name
    ]
    pq.write_table(table, legacy, compression="lz4")
    cleared = cache_clear(cdir)
    assert cleared.summary["removed"] == 2 and list(cdir.iterdir()) == []


def _damages(data: bytes):
    """(what, the damaged bytes, whether the reader must refuse them). The file has no checksum (one would cost as much
    as the read), so a flip inside a data buffer may go unseen; what the test asks then is only the same table."""
    n = len(data)
    yield "garbage", b"garbage", True
    yield "empty", b"", True
    yield "magic only", data[:8], True
    for frac in (0.25, 0.5, 0.9):
        yield f"cut at {frac}", data[: int(n * frac)], True
    yield "no last byte", data[:-1], True
    yield "footer zeroed", data[:-64] + bytes(64), True
    mid = bytearray(data)
    mid[n // 2 - 8 : n // 2 + 8] = b"\xff" * 16
    yield "flipped middle", bytes(mid), False
    head = bytearray(data)
    head[8:40] = b"\xff" * 32
    yield "flipped schema", bytes(head), False  # the reader takes the schema from the footer


def test_a_damaged_entry_is_rebuilt_without_an_error(tmp_path):
    p = _small(tmp_path)
    cdir = tmp_path / "cache"
    cold = tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    good = entry.read_bytes()
    for what, data, refused in _damages(good):
        entry.write_bytes(data)
        t = tracekit.load(p, cache_dir=cdir)  # no exception, whatever the damage
        if refused:
            assert not t.report.from_cache, what
        if t.report.from_cache:
            _assert_same_table(cold.events, t.events)
        else:
            assert entry.read_bytes() == good, what  # rebuilt, byte for byte
        assert t.report.warnings == cold.report.warnings, what
        again = tracekit.load(p, cache_dir=cdir)
        assert again.report.from_cache, what
        _assert_same_table(cold.events, again.events)
        entry.write_bytes(good)
    assert cache_info(cdir).summary["entries"] == 1


def test_dictionary_codes_out_of_range_are_refused(tmp_path):
    """The one damage Arrow would misread rather than refuse: a category code past the dictionary's end."""
    p = _small(tmp_path)
    t = tracekit.load(p, cache=False)
    events = t.events.copy()
    bad = pa.Table.from_pandas(events, preserve_index=False)
    i = bad.schema.get_field_index("name")
    col = bad.column(i).combine_chunks()
    codes = pa.array([0, 99], type=col.type.index_type)
    bad = bad.set_column(i, bad.schema.field(i), pa.DictionaryArray.from_arrays(codes, col.dictionary, safe=False))
    meta = {
        b"tracekit": json.dumps({"key": cache_key.key_of(p), "meta": t.meta, "report": t.report.to_dict()}).encode(),
        **{k: v for k, v in bad.schema.metadata.items()},
    }
    bad = bad.replace_schema_metadata(meta)
    entry = _cache.cache_path(p)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with pa.ipc.new_file(str(entry), bad.schema) as w:
        w.write_table(bad)
    integrity.seal_file(entry)  # sealed as the cache seals it: refused past the seal, by the validation
    assert _cache.read(p) is None
    assert tracekit.load(p).report.from_cache is False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_loaded_trace_does_not_keep_the_cache_file_mapped(tmp_path):
    """The columns are copied out of the mapping, so a Trace does not pin the file (cache clear frees the disk)."""
    import gc

    p = _small(tmp_path)
    tracekit.load(p)
    t = tracekit.load(p)
    assert t.report.from_cache
    gc.collect()
    entry = str(_cache.cache_path(p))
    assert entry not in Path("/proc/self/maps").read_text()
    assert len(t.events) == 2


# --------------------------------------------------------------------------- the key (issue 26)


def test_the_key_covers_the_whole_file(tmp_path, monkeypatch):
    """Small files (and files changed in the last RACY_NS) are checksummed byte for byte; a big, settled one over
    both ends and SAMPLES blocks spread evenly between them, the last block ending at the file's end."""
    p = _small(tmp_path)
    k = cache_key.key_of(p)
    st = p.stat()
    assert (k["size"], k["mtime_ns"], k["ctime_ns"], k["ino"]) == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
    )
    assert k["whole"] is True and k["format"] == cache_key.CACHE_FORMAT
    import zlib

    assert k["crc32"] == zlib.crc32(p.read_bytes())
    monkeypatch.setattr(cache_key, "WHOLE_MAX", 0)
    assert cache_key.key_of(p)["whole"] is True  # just written: racy
    monkeypatch.setattr(cache_key, "RACY_NS", -(10**18))
    assert cache_key.key_of(p)["whole"] is False
    size = 10 << 20
    spots = cache_key._samples(size)
    assert len(spots) == cache_key.SAMPLES + 2
    assert min(o for o, _ in spots) == 0 and max(o + n for o, n in spots) == size
    starts = sorted(o for o, n in spots if n == cache_key._BLOCK)
    gaps = {b - a for a, b in zip(starts, starts[1:])}
    assert max(gaps) - min(gaps) <= 1 and max(gaps) < size / (cache_key.SAMPLES - 2)  # even, over the whole file


def test_a_changed_byte_anywhere_in_a_small_file_misses(tmp_path):
    """Every byte of a file up to WHOLE_MAX is in the checksum: flip each of a few positions, ctime aside."""
    p = _small(tmp_path)
    data = p.read_bytes()
    k = cache_key.key_of(p)
    for at in (0, len(data) // 3, len(data) // 2, len(data) - 2):
        changed = bytearray(data)
        changed[at] ^= 0x01
        p.write_bytes(bytes(changed))
        assert cache_key.key_of(p, whole=True)["crc32"] != k["crc32"], at
    p.write_bytes(data)


def test_a_source_that_is_not_a_file_has_no_key(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    assert cache_key.key(fifo) is None  # and it returned: opened without waiting for a writer


# --------------------------------------------------------------------------- what is tracekit's (issue 26)


def test_only_tracekits_entries_are_recognised(tmp_path):
    p = _small(tmp_path)
    cdir = tmp_path / "cache"
    tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    assert _cache.ENTRY_NAME.match(entry.name)
    stored = _cache.stored_metadata(entry)
    assert stored["key"]["format"] == cache_key.CACHE_FORMAT and stored["report"]["events_kept"] == 2
    assert _cache.read_metadata(entry) == stored
    table = pa.table({"a": [1]})
    plain = cdir / "user.0123456789abcdef0123.arrow"  # an entry's name, a user's Arrow file
    with pa.ipc.new_file(str(plain), table.schema) as w:
        w.write_table(table)
    garbage = cdir / "junk.0123456789abcdef0123.arrow"
    garbage.write_bytes(b"ARROW1\x00\x00" + b"\xff" * 100)
    empty = cdir / "empty.0123456789abcdef0123.arrow"
    empty.write_bytes(b"")
    for other in (plain, garbage, empty):
        assert _cache.stored_metadata(other) is None, other.name
        with pytest.raises(ValueError):
            _cache.read_metadata(other)
    info = cache_info(cdir)
    assert info.summary["entries"] == 1 and info.summary["other_files"] == 3
    assert info.tables["entries"]["file"].tolist() == [entry.name]


@pytest.mark.parametrize(
    "name,ours",
    [
        (".tmp-tracekit-123-abcd_9yz.arrow", True),
        (".tmp-abcd_9yz.arrow", True),
        (".tmp-abcd1234.parquet", True),
        (".tmp-notes.arrow", False),
        ("tmp-abcd1234.arrow", False),
        (".tmp-abcd1234.arrow.bak", False),
        (".tmp-tracekit-x-abcd1234.arrow", False),
    ],
)
def test_temporary_file_names(tmp_path, name, ours):
    f = tmp_path / name
    f.write_bytes(b"ARROW1\x00\x00")
    assert _cache.is_temporary(f, os.lstat(f)) is ours
    f.write_bytes(b"not an entry")
    assert _cache.is_temporary(f, os.lstat(f)) is False  # the right name, someone else's content


def test_an_entry_of_format_4_is_listed_cleared_and_replaced(tmp_path, monkeypatch):
    """What tracekit wrote before issue 26 is still tracekit's: listed with its format, cleared, and replaced by a
    format-5 entry (same name) on the next load."""
    p = _small(tmp_path)
    cdir = tmp_path / "cache"
    monkeypatch.setattr(cache_key, "CACHE_FORMAT", 4)
    tracekit.load(p, cache_dir=cdir)
    monkeypatch.setattr(cache_key, "CACHE_FORMAT", 5)
    assert cache_info(cdir).tables["entries"]["format"].tolist() == [4]
    assert tracekit.load(p, cache_dir=cdir).report.from_cache is False
    assert cache_info(cdir).tables["entries"]["format"].tolist() == [5]
    assert cache_clear(cdir).summary["removed"] == 1 and list(cdir.iterdir()) == []


def test_a_legacy_name_holding_a_users_file_is_not_removed_by_a_write(tmp_path):
    """The write removes this trace's old parquet entry only when it is one (tracekit's key inside)."""
    p = _small(tmp_path)
    cdir = tmp_path / "cache"
    cdir.mkdir()
    legacy = _cache.cache_path(p, cdir, ".parquet")
    pq.write_table(pa.table({"a": [1]}), legacy)
    tracekit.load(p, cache_dir=cdir)
    assert legacy.exists() and _cache.cache_path(p, cdir).exists()
