"""Ingest: files in, a normalised :class:`~tracekit.trace.Trace` out."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..data import inputs_read
from ..errors import InputError, ResourceLimitError
from ..trace import IngestReport, Trace
from ..cache import trace_entries as _cache
from ..cache import keys as _cache_key
from .compression import HEAD_BYTES, compression_of, without_bom
from .kineto.columns import NOT_EVENT_REASONS
from .kineto.document import decode_slices, split_document
from .kineto.pieces import NotStreamable
from .kineto.stream import decode_stream
from .normalize import build_events, recorded
from .nsys_sqlite import read_nsys, reads_nsys
from .reader import StreamDamaged, read_ahead
from .repair import replace_lone_surrogates, replace_nonfinite, salvage_json
from . import rocpd_sqlite, rocprof_json
from .whole_text import read_text
from ..errors import check_argument

log = logging.getLogger(__name__)
TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", ".json.zstd")


def find_trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside ``directory`` (not recursive), sorted by name.

    When some names say ``trace`` (sglang's ``…-TP-0.trace.json.gz``, PyTorch's ``….pt.trace.json``), only
    those count, so result or truth JSON files beside them are not mistaken for traces."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    named = [p for p in files if "trace" in p.name.lower()]
    return named or files


def resolve_trace_path(path: str | Path) -> Path:
    """A trace file, or a directory holding exactly one; anything else is an InputError."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist; pass the path of {inputs_read()}")
    if p.is_dir():
        files = find_trace_files(p)
        if not files:
            raise InputError(
                f"{p} is a directory with no trace file (*.json, *.json.gz, *.json.zst) in it; pass a trace file"
            )
        if len(files) > 1:
            names = ", ".join(f.name for f in files[:5]) + (", …" if len(files) > 5 else "")
            raise InputError(f"{p} holds {len(files)} trace files ({names}); pass one of them")
        return files[0]
    return p


def load(path: str | Path, *, cache: bool = True, cache_dir: str | Path | None = None, progress=None) -> Trace:
    """Load one rank's trace into a :class:`Trace`.

    Accepts ``.json``, ``.json.gz`` and ``.json.zst`` (detected from the content), Kineto's
    object form and the bare Chrome-trace array. A truncated file is salvaged: every complete
    event is kept and a warning says how many bytes were lost. With ``cache`` (the default) the
    normalised table is stored (an Arrow IPC file, memory-mapped on reading) and reused while the file is
    unchanged. ``progress(done, total)``, when given, is called with the bytes of the file read so far (for a progress bar).
    """
    check_argument(path, "path", "a path (str or Path) of a trace file", paths=True)
    source = resolve_trace_path(path)
    if source.exists() and not source.is_file():
        raise InputError(
            f"{path} is not a regular file (a FIFO, a socket or a device): tracekit reads a trace from a"
            " file; save it to one first"
        )
    # messages name the file as the user gave it, or the file found in the directory they gave
    shown = str(path) if source == Path(path) else str(Path(path) / source.name)
    cdir = Path(cache_dir) if cache_dir is not None else None
    if cache:
        hit = _cache.read(source, cdir)
        if hit is not None:
            hit.report.path = shown
            hit.meta["source"] = shown
            return hit
    before = _cache_key.key(source) if cache else None  # a file that changes while it is read is not cached
    trace = ingest_file(source, display_path=shown, progress=progress)
    if cache:
        _cache.write(source, trace, cdir, before=before)
    return trace


def ingest_file(source: Path, display_path: str | None = None, progress=None) -> Trace:
    # Decoding makes ~10^6 short-lived objects and no reference cycles; the cyclic collector, left on, walks
    # the whole heap again and again while they exist (16% of the decode time measured on 8 MiB pieces).
    # It is off for the ingest only, in this process and the forked decode helper, and back as it was after.
    gc_was_on = gc.isenabled()
    gc.disable()
    base = _vm_bytes()
    try:
        return _ingest_file(source, display_path, progress)
    except MemoryError:
        pass  # raised below, once this handler has let go of the traceback and the buffers its frames hold
    except RuntimeError as exc:  # a reader or collector thread the OS had no memory to start (ulimit -v): the same
        if "can't start new thread" not in str(exc):
            raise
    finally:
        if gc_was_on:
            gc.enable()
    raise out_of_memory(display_path or str(source), source, base)


def out_of_memory(shown: str, source: Path, base: int) -> ResourceLimitError:
    """The one sentence for a trace that does not fit the memory this process may use: how much loading it
    needs — the process's address space before (``base``) plus about the text's size (a 300 MB trace loads
    within 650 MiB of address space, not 550, of which 360 MiB are Python and tracekit) — and the limit."""
    try:
        text = _text_size(source)
        limit = _address_limit()
    except (OSError, ValueError, MemoryError):
        text, limit = 0, None
    need = base + text
    said = f" ({text / 1e6:,.0f} MB of text)" if text else ""
    lim = f" (its address space is limited to {limit / 1e6:,.0f} MB: ulimit -v)" if limit else ""
    return ResourceLimitError(
        f"{shown} needs about {need / 1e6:,.0f} MB of memory to load{said}, more than this"
        f" process may use{lim}; raise the limit or free memory and run again, or pass a"
        " smaller trace"
    )


def _text_size(source: Path) -> int:
    """The bytes of text of a trace file: its size, or what its compressed stream says it holds (gzip's last
    member's length field, zstd's frame content size), else its size times a typical ratio."""
    size = source.stat().st_size
    with open(source, "rb") as fh:
        head = fh.read(18)
        if compression_of(head) == "gzip" and size >= 18:
            fh.seek(size - 4)
            isize = int.from_bytes(fh.read(4), "little")  # modulo 2**32: the wraps are guessed at 15x
            return isize + max(0, round((size * 15 - isize) / (1 << 32))) * (1 << 32) if isize else size * 15
        if compression_of(head) == "zstd":
            import zstandard

            try:
                n = zstandard.frame_content_size(head)
            except zstandard.ZstdError:
                n = -1
            return n if n > 0 else size * 25
    return size


def _vm_bytes() -> int:
    """The address space this process uses now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def _address_limit() -> int | None:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _refuse_perfetto(source: Path, shown: str) -> None:
    """A Perfetto protobuf trace (rocprofv3's ``--output-format pftrace``; a ``Trace`` message: field 1, length-
    delimited, so its first byte is 0x0A and what follows is no JSON) gets its own sentence: no maintained reader of
    it is among tracekit's dependencies (Perfetto's ``trace_processor`` downloads a native binary at run time)."""
    try:
        with open(source, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return  # the readers below say what is wrong with the path
    # by content, never by the name: a JSON renamed .pftrace is read as JSON. A protobuf Trace starts with the tag
    # 0x0A and a varint length, and its packets hold control bytes (varint tags 0x08, 0x10, small lengths and
    # values); a JSON (or any text) may start with a newline too, but text has no control bytes
    control = any(b < 0x09 or 0x0E <= b < 0x20 for b in head)
    if head[:1] == b"\x0a" and control:
        raise InputError(
            f"{shown} is a Perfetto protobuf trace, which tracekit does not read; record with rocprofv3"
            " --output-format json (or export a torch-profiler JSON, or an nsys SQLite: nsys export --type sqlite)"
        )


def _ingest_file(source: Path, display_path: str | None, progress) -> Trace:
    shown = display_path or str(source)
    _refuse_perfetto(source, shown)
    if rocprof_json.is_rocprof_json(rocprof_json.text_head(source)):  # chosen by content, not by the name
        return rocprof_json.ingest(source, shown)
    if rocpd_sqlite.is_rocpd(source):  # an SQLite file with rocpd tables (rocprofv3's database), by content
        return rocpd_sqlite.ingest(source, shown)
    if reads_nsys(source):  # an Nsight Systems export (SQLite) or report, by content
        return read_nsys(source, shown)
    cols = None
    json_cut = False
    report = IngestReport(path=shown)
    try:
        size = source.stat().st_size
        report.file_bytes = size
        counter = _Counter()
        compression = _compression(source)
        # compressed input: this process decompresses (in its own thread when it decodes alone), and the
        # pieces reach the helper process through shared memory; an uncompressed file's pieces are read by
        # the helper itself
        workers = _workers(size if compression == "none" else size * COMPRESSION_GUESS)
        on_read = (lambda pos: progress(pos, size)) if progress else None
        cols = decode_stream(
            counter.count(read_ahead(source, on_read=on_read, inline=workers > 1)),
            workers=workers,
            plain_file=str(source) if compression == "none" else None,
            on_position=on_read,
        )
        # a plain file's text is the file (with the helper, it is not all read through the counter)
        report.text_bytes = size if compression == "none" else counter.total
        report.compression = compression
    except ResourceLimitError:
        raise  # the other reader would reach the same limit
    except (NotStreamable, StreamDamaged, InputError):
        cols = None  # the whole-document reader below salvages, or says exactly what is wrong
    except OSError as exc:
        raise InputError(f"{shown} could not be read ({exc.strerror or exc}); check the path and permissions") from exc
    if cols is None:
        report.reader = "whole"
        cols, json_cut = _whole_document(source, shown, report)
    report.records_read = cols.n
    events, dropped, lanes = build_events(cols)  # consumes the raw columns
    for reason, count in dropped.items():
        if reason in NOT_EVENT_REASONS:
            report.not_events[reason] = count
        else:
            report.dropped[reason] = count
    report.events_kept = len(events)
    report.loose_chunks = cols.loose_chunks
    report.int_overflows = cols.int_overflows
    if cols.utf8_repairs:
        report.warnings.append(
            f"{shown}: {cols.utf8_repairs} record(s) held invalid UTF-8; the bad bytes were"
            " replaced by U+FFFD and the records kept"
        )
    if cols.int_overflows:
        report.warnings.append(
            f"{shown}: {cols.int_overflows} integer arg value(s) beyond the int64 range were set to -1"
        )
    if report.dropped:
        detail = "; ".join(f"{c} {r}" for r, c in sorted(report.dropped.items()))
        report.warnings.append(f"{shown}: dropped {sum(report.dropped.values())} unusable event(s): {detail}")
    report.check()
    if report.events_kept == 0:
        if report.salvaged:
            raise InputError(
                f"{shown} is truncated or damaged and none of the {report.records_read} complete records"
                " before the damage is a usable trace event; pass a complete torch-profiler trace"
            )
        raise InputError(
            f"{shown} holds no usable trace events ({report.records_read} records read); pass a trace recorded"
            f" with events: tracekit reads {inputs_read()}"
        )
    header = cols.header
    del cols
    meta = _meta(header, lanes, events, shown)
    if json_cut and meta.get("base_time_ns") is None:
        report.warnings.append(
            f"{shown}: the trace's trailing metadata (baseTimeNanoseconds) was lost with the cut;"
            " times are as written in the file"
        )
    return Trace(events=events, meta=meta, report=report)


PARALLEL_MIN_BYTES = 32 << 20  # of text: below this a second process costs more than it saves
COMPRESSION_GUESS = 5  # text bytes per compressed byte, at the least, for JSON traces (Kineto's: 10-20)


def _workers(text_bytes: int) -> int:
    """Decode with a second process for big traces on machines with a spare core (TRACEKIT_WORKERS=1
    disables, TRACEKIT_WORKERS=2 forces it whatever the size)."""
    env = os.environ.get("TRACEKIT_WORKERS")
    if env is not None:
        try:
            return max(1, int(env)) if _can_fork() else 1
        except ValueError:
            return 1
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may use (a container may allow fewer)
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 2 if text_bytes >= PARALLEL_MIN_BYTES and cores >= 2 and _can_fork() else 1


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


class _Counter:
    def __init__(self) -> None:
        self.total = 0

    def count(self, blocks):
        for b in blocks:
            self.total += len(b)
            yield b


def _compression(source: Path) -> str:
    with open(source, "rb") as fh:
        return compression_of(fh.read(HEAD_BYTES))


def _whole_document(source: Path, shown: str, report: IngestReport):
    raw_text = read_text(source)
    report.compression = raw_text.compression
    report.file_bytes = raw_text.file_bytes
    report.text_bytes = len(raw_text.data)
    report.warnings.extend(raw_text.warnings)
    if raw_text.stream_truncated:
        report.salvaged = True  # the compressed stream is cut or corrupt: what follows is what survived
    data = raw_text.data
    del raw_text
    if data[-1:] == b"\x00":  # a file preallocated, or cut by a crash, can end in NUL bytes
        n = len(data)
        data = data.rstrip(b"\x00")
        if not data.strip():
            raise InputError(
                f"{shown} holds nothing but {n} NUL bytes (a file that was allocated but never"
                " written); pass a complete torch-profiler trace"
            )
        report.warnings.append(f"{shown}: ignored {n - len(data)} NUL bytes at the end of the text")
    if not data.strip():
        if report.salvaged:
            raise InputError(
                f"{shown} is a damaged {report.compression} stream with no readable text before the"
                f" damage ({report.warnings[-1].split(': ', 1)[-1]}); pass a complete torch-profiler trace"
            )
        raise InputError(
            f"{shown} is empty{' after decompression' if report.compression != 'none' else ''};"
            " pass a complete torch-profiler trace"
        )
    data = without_bom(data)
    raws, header, cut = _split(shown, data, report)
    return decode_slices(raws, header), cut


# text repairs tried when the JSON does not decode: (cheap pre-check needles, repair, what the warning says)
_REPAIRS = (
    ((b"\\ud", b"\\uD"), replace_lone_surrogates, "lone UTF-16 surrogate escape(s) in strings were replaced by U+FFFD"),
    (
        (b"NaN", b"Infinity"),
        replace_nonfinite,
        "NaN/Infinity literal(s), which JSON does not allow, were read as non-finite numbers",
    ),
)


def _split(shown: str, data: bytes | bytearray, report: IngestReport) -> tuple[list, dict[str, Any], bool]:
    """(event slices, header, whether the JSON had to be cut), repairing what can be repaired."""
    try:
        try:
            return (*split_document(shown, data), False)
        except msgspec.DecodeError as exc:
            first_error = str(exc)
        repaired = False
        if "UTF-8" in first_error:  # in the header (events are repaired one by one later)
            data = bytes(data).decode("utf-8", "replace").encode("utf-8")
            repaired = True
            report.warnings.append(
                f"{shown}: the trace's metadata holds invalid UTF-8; the bad bytes were replaced by U+FFFD"
            )
        for needles, repair, what in _REPAIRS:
            fixed_data = repair(data) if any(n in data for n in needles) else None
            if fixed_data is not None:
                data, count = fixed_data
                repaired = True
                report.warnings.append(f"{shown}: {count} {what}")
        if repaired:
            try:
                return (*split_document(shown, data), False)
            except msgspec.DecodeError as exc:
                first_error = str(exc)
        fixed = salvage_json(data)
        if fixed is None:
            raise InputError(f"{shown} is not valid JSON ({first_error}); tracekit reads {inputs_read()}")
        text, lost = fixed
        try:
            raws, header = split_document(shown, text)
        except msgspec.DecodeError as exc:
            again = "" if str(exc) == first_error else f" and could not be repaired ({exc})"
            raise InputError(
                f"{shown} is not valid JSON ({first_error}){again}; pass a complete torch-profiler trace"
            ) from exc
        except InputError as exc:
            if "traceEvents" not in str(exc):
                raise
            raise InputError(
                f"{shown} is truncated or damaged ({first_error}) before its first trace event; pass a"
                " complete torch-profiler trace"
            ) from exc
    except RecursionError as exc:
        raise InputError(
            f"{shown} nests JSON arrays or objects too deeply to be a trace; tracekit reads {inputs_read()}"
        ) from exc
    report.salvaged = True
    report.bytes_lost = lost
    what = (
        f"lost the last {lost} bytes of text"
        if lost
        else "the text ends right after a complete record, without its closing brackets"
    )
    report.warnings.append(
        f"{shown}: the JSON is truncated or damaged ({first_error}); salvaged {len(raws)} complete records and {what}"
    )
    return raws, header, True


def _meta(header: dict[str, Any], lanes: dict[str, Any], events, shown: str) -> dict[str, Any]:
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    devices = header.get("deviceProperties") if isinstance(header.get("deviceProperties"), list) else []
    base = header.get("baseTimeNanoseconds")
    gpu_devices = events["device"].to_numpy()[events["kind"].isin(("kernel", "memcpy", "memset")).to_numpy()]
    used = sorted(int(d) for d in np.unique(gpu_devices) if d >= 0)
    num_sms = None
    props = [d for d in devices if isinstance(d, dict) and isinstance(d.get("numSms"), int)]
    match = [d for d in props if used and d.get("id") == used[0]]
    if match or len(props) == 1 or (props and not used):
        num_sms = (match or props)[0]["numSms"]
    return {
        "source": shown,
        "rank": dist.get("rank") if isinstance(dist.get("rank"), int) else None,
        "world_size": dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        "backend": dist.get("backend"),
        "distributed_info": dist,
        "device_properties": devices,
        "devices_used": used,
        "num_sms": num_sms,
        "base_time_ns": base if isinstance(base, int) else None,
        "schema_version": header.get("schemaVersion"),
        "display_time_unit": header.get("displayTimeUnit"),
        "trace_name": header.get("traceName") if isinstance(header.get("traceName"), str) else None,
        "profiler": {
            "name": "kineto",
            "label": "PyTorch profiler (Kineto)",
            "version": None,
            "recorded": recorded(events),
        },
        **lanes,
    }
