"""A trace's ``distributedInfo`` (its rank and the run's world size) from the head of the file, without reading
its events: what the ranks of a run need before any file is reduced (docs/multirank.md).

PyTorch's profiler writes ``distributedInfo`` before ``traceEvents`` (``{"schemaVersion": 1, "deviceProperties":
[…], "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 8}, …, "traceEvents": [`` — the corpus's
8-rank run has it 3.3 KB in), so the text before ``traceEvents`` (at most :data:`HEAD_LIMIT` bytes of it) is read
and nothing else. A file whose head does not say it (a writer that puts it after the events, a damaged or
unreadable file) gives ``{}``: the full read of the file, later, is the authority and says what is wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import TracekitError
from .reader import StreamDamaged, iter_blocks

HEAD_LIMIT = 4 << 20  # bytes of text searched for distributedInfo before giving up (deviceProperties can be long)
PEEK_BLOCK = 64 << 10  # text decompressed at a time while looking
EVENTS = b'"traceEvents"'
DIST = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')


def head_text(path: str | Path) -> bytes:
    """The text of ``path`` before its ``"traceEvents"`` key (at most HEAD_LIMIT bytes); b"" when it cannot be
    read."""
    buf = bytearray()
    blocks = iter_blocks(Path(path), block=PEEK_BLOCK)
    try:
        for blk in blocks:
            buf += blk
            at = buf.find(EVENTS)
            if at >= 0:
                return bytes(buf[:at])
            if len(buf) >= HEAD_LIMIT:
                break
    except (OSError, EOFError, ValueError, StreamDamaged, TracekitError):
        return b""
    finally:
        blocks.close()
    return bytes(buf)


def distributed_info(path: str | Path) -> dict:
    """``{"rank": int | None, "world_size": int | None}`` from the trace's ``distributedInfo`` in its head, or
    ``{}`` when the head says none."""
    m = DIST.search(head_text(path))
    if not m:
        return {}
    try:
        info = json.loads(m.group(1))
    except ValueError:
        return {}
    if not isinstance(info, dict):
        return {}

    def whole(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    return {"rank": whole(info.get("rank")), "world_size": whole(info.get("world_size"))}
