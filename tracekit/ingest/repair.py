"""Repairs of JSON text that a decoder refuses: a truncated document cut after its last complete element and
closed (:func:`salvage_json`), the bare ``NaN``/``Infinity`` tokens and lone ``\\uD800`` escapes that Python's
``json`` writes rewritten. Each is vectorised with numpy and ignores what lies inside strings; each returns
what it changed, so that the loss is reported, never hidden.
"""

from __future__ import annotations

import re

import numpy as np

_SCAN_BLOCK = 8 << 20
_OPEN_TO_CLOSE = {ord("{"): b"}", ord("["): b"]"}


def salvage_json(data: bytes | bytearray, max_depth: int | None = None) -> tuple[bytes, int] | None:
    """Cut a truncated JSON document after its last complete element and close it.

    The cut is made after the last complete element of the top-level array (Chrome array form,
    nesting depth 1) or after the last complete value at depth 2 or less of a top-level object
    (Kineto form: an event of ``traceEvents``, or a whole top-level value), or at depth ``max_depth`` or less
    when given (rocprofv3's records lie at depth 5). Returns
    ``(repaired_text, bytes_lost)`` or ``None`` when no cut point exists. The scan is vectorised
    in blocks of 8 MiB and ignores brackets inside strings.
    """
    view = memoryview(data)
    n = len(view)
    stripped = bytes(view[:64]).lstrip()
    if stripped[:1] not in (b"{", b"["):
        return None
    if max_depth is None:
        max_depth = 1 if stripped[:1] == b"[" else 2
    depth_carry = 0
    parity_carry = 0
    bs_carry = 0
    best = -1
    best_depth = -1
    latest: dict[int, tuple[int, int]] = {}  # level -> (position, char) of the latest opener so far
    at_best: dict[int, tuple[int, int]] = {}  # the same, as it stood at the best cut point
    for off in range(0, n, _SCAN_BLOCK):
        chunk = bytes(view[off : off + _SCAN_BLOCK])
        b = np.frombuffer(chunk, dtype=np.uint8)
        q, bs_carry = _unescaped_quotes(b, chunk, bs_carry)
        par = (np.cumsum(q, dtype=np.int64) + parity_carry) & 1
        # An opening quote has parity 1 and a closing one 0; a bracket is never a quote, so a
        # bracket is structural exactly when the parity at its position is 0.
        outside = par == 0
        is_open = ((b == 123) | (b == 91)) & outside
        is_close = ((b == 125) | (b == 93)) & outside
        depth = np.cumsum(is_open.astype(np.int32) - is_close.astype(np.int32), dtype=np.int64) + depth_carry
        cand = np.flatnonzero(is_close & (depth <= max_depth) & (depth >= 1))
        block_openers = {lvl: np.flatnonzero(is_open & (depth == lvl)) for lvl in range(1, max_depth + 1)}
        if cand.size:
            p = int(cand[-1])
            best, best_depth = off + p, int(depth[p])
            at_best = dict(latest)
            for lvl, pos in block_openers.items():
                before = pos[pos < p]
                if before.size:
                    at_best[lvl] = (off + int(before[-1]), int(b[before[-1]]))
        for lvl, pos in block_openers.items():
            if pos.size:
                latest[lvl] = (off + int(pos[-1]), int(b[pos[-1]]))
        if depth.size:
            depth_carry, parity_carry = int(depth[-1]), int(par[-1])
    if best < 0:
        return None
    closers = b""
    for level in range(best_depth, 0, -1):
        if level not in at_best:
            return None
        closers += _OPEN_TO_CLOSE[at_best[level][1]]
    return bytes(view[: best + 1]) + closers, n - (best + 1)


def _unescaped_quotes(b: np.ndarray, chunk: bytes, bs_carry: int) -> tuple[np.ndarray, int]:
    """Mask of the quotes in a block that end or start a string: those not escaped by an odd run of
    backslashes (``\\"`` ends a string, ``\\\"`` does not). ``bs_carry`` is the run of backslashes that
    ended the previous block; returns the mask and this block's trailing run."""
    q = b == 34
    pos = np.flatnonzero(q)
    if pos.size:
        after_bs = np.zeros(pos.size, dtype=bool)
        inner = pos > 0
        after_bs[inner] = b[pos[inner] - 1] == 92
        after_bs[~inner] = bs_carry > 0
        for p in pos[after_bs].tolist():  # rare: quotes right after a backslash
            i = p - 1
            while i >= 0 and chunk[i] == 92:
                i -= 1
            if (p - 1 - i + (bs_carry if i < 0 else 0)) % 2:
                q[p] = False
    trailing = len(chunk) - len(chunk.rstrip(b"\\"))
    return q, trailing + (bs_carry if trailing == len(chunk) else 0)


_NONFINITE_RE = re.compile(rb"(?<![\w.+-])(-?Infinity|NaN)(?![\w.])")
_NONFINITE_AS = {b"NaN": b"1e999", b"Infinity": b"1e999", b"-Infinity": b"-1e999"}


def replace_nonfinite(data: bytes | bytearray) -> tuple[bytes, int] | None:
    """Rewrite the bare ``NaN`` / ``Infinity`` / ``-Infinity`` tokens that Python's ``json`` writes (and JSON
    forbids) as ``±1e999``, which decodes as a non-finite number; tokens inside strings are left alone.

    Returns ``(text, replacements)``, or ``None`` when there is no such token outside a string."""
    matches = list(_NONFINITE_RE.finditer(data))
    if not matches:
        return None
    starts = np.array([m.start() for m in matches], dtype=np.int64)
    outside = _outside_strings(data, starts)
    if not outside.any():
        return None
    pieces: list[bytes] = []
    prev = 0
    for m, out in zip(matches, outside.tolist()):
        if out:
            pieces += [bytes(data[prev : m.start()]), _NONFINITE_AS[m.group(0)]]
            prev = m.end()
    pieces.append(bytes(data[prev:]))
    return b"".join(pieces), int(outside.sum())


def _outside_strings(data: bytes | bytearray, positions: np.ndarray) -> np.ndarray:
    """For sorted byte positions, whether each lies outside every JSON string (quote parity, in blocks)."""
    view = memoryview(data)
    result = np.zeros(len(positions), dtype=bool)
    parity_carry = 0
    bs_carry = 0
    for off in range(0, len(view), _SCAN_BLOCK):
        chunk = bytes(view[off : off + _SCAN_BLOCK])
        b = np.frombuffer(chunk, dtype=np.uint8)
        q, bs_carry = _unescaped_quotes(b, chunk, bs_carry)
        par = (np.cumsum(q, dtype=np.int64) + parity_carry) & 1  # parity after each byte
        sel = np.flatnonzero((positions >= off) & (positions < off + len(chunk)))
        if sel.size:
            local = positions[sel] - off
            # parity before the byte: after the previous one (a token starts with N, I or -, never a quote)
            before = np.where(local > 0, par[np.maximum(local - 1, 0)], parity_carry)
            result[sel] = before == 0
        parity_carry = int(par[-1]) if par.size else parity_carry
    return result


_SURROGATE_RE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def replace_lone_surrogates(data: bytes | bytearray) -> tuple[bytes, int] | None:
    """Rewrite ``\\uD800``-style escapes that are not half of a surrogate pair (Python's ``json`` writes them
    for undecodable bytes; msgspec rejects them) as ``\\uFFFD``. Returns ``(text, replacements)`` or None."""
    found = [m for m in _SURROGATE_RE.finditer(data) if len(m.group(1)) % 2 == 1]  # an even run is literal text
    lone = []
    i = 0
    while i < len(found):
        m = found[i]
        if int(m.group(2), 16) < 0xDC00 and i + 1 < len(found):
            n = found[i + 1]
            if n.start() == m.end() and len(n.group(1)) == 1 and int(n.group(2), 16) >= 0xDC00:
                i += 2  # a high surrogate followed by a low one: a valid pair
                continue
        lone.append(m)
        i += 1
    if not lone:
        return None
    pieces: list[bytes] = []
    prev = 0
    for m in lone:
        at = m.start(2) - 2  # the escape's own backslash
        pieces += [bytes(data[prev:at]), b"\\ufffd"]
        prev = m.end()
    pieces.append(bytes(data[prev:]))
    return b"".join(pieces), len(lone)
