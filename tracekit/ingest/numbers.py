"""Exact conversion of JSON number text (microseconds) to int64 nanoseconds, vectorised.

Kineto writes ``ts`` as microseconds with up to three decimals; epoch-scale values such as
``1712195495519689.047`` have 19 significant digits, more than a float64 holds, so ``ts`` is
decoded as raw text and converted here without any float. A fourth and later decimal rounds
half away from zero. Text that is not a plain decimal (an exponent, a quoted string, junk) is
converted through :class:`decimal.Decimal`, one value at a time; such values are rare.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
_SEP = 0  # byte that joins the tokens; never occurs inside JSON number text


_MAX_BY_SCALE = {d: (2**63 - 1) // 10 ** (3 - d) for d in range(4)}


def _start(tokens: list) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Zeroed outputs, and the tokens as a fixed-width bytes array (None when there is nothing to parse)."""
    n = len(tokens)
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if n == 0:
        return out, valid, None
    arr = np.array(b"\x00".join(tokens).split(b"\x00"))  # accepts any buffer (msgspec.Raw) without a loop
    return out, valid, (arr if arr.dtype.itemsize else None)


def raw_to_ns(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """Convert number tokens (bytes-like; empty = missing) to (int64 ns, valid mask).

    Fastest path (:func:`_same_shape_to_ns`): the tokens that share the batch's most common shape
    (same length, digits with the dot in the same column, as Kineto writes them) are read as a
    (tokens × characters) byte matrix straight from the joined text, without a Python object per
    token. The rest: plain decimals with at most three decimals are parsed by numpy as integers
    once the dot is removed (``12.345`` → ``12345`` ns); anything else goes through
    :func:`_matrix_to_ns`.
    """
    n = len(tokens)
    if n < 64:
        return _split_to_ns(tokens)
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    done = _same_shape_to_ns(tokens, out, valid)
    if done is None:
        return _split_to_ns(tokens)
    rest = np.flatnonzero(~done)
    if rest.size:
        r_out, r_ok = _split_to_ns([tokens[i] for i in rest.tolist()])
        out[rest], valid[rest] = r_out, r_ok
    return out, valid


def _same_shape_to_ns(tokens: list, out: np.ndarray, valid: np.ndarray) -> np.ndarray | None:
    """Convert, in place, the tokens of the most common shape; return the mask of those converted
    (``None`` when no shape is common enough to be worth it).

    A shape is a length and a dot column: ``dddd.ddd`` (at most three decimals) or ``dddd``, with
    at most 19 digits once scaled to nanoseconds. The digits are accumulated column by column
    (Horner) in uint64, which holds any 19-digit value; values beyond the int64 range are left to
    the exact general path, as is every other token."""
    n = len(tokens)
    joined = b"\x00".join(tokens)  # accepts any buffer (msgspec.Raw) without a loop
    buf = np.frombuffer(joined, dtype=np.uint8)
    seps = np.flatnonzero(buf == _SEP)
    if seps.size != n - 1:  # cannot happen for JSON text (no raw NUL), but never guess
        return None
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = seps + 1
    lengths = np.empty(n, dtype=np.int64)
    lengths[:-1] = seps - starts[:-1]
    lengths[-1] = len(buf) - starts[-1]
    counts = np.bincount(np.minimum(lengths, 24), minlength=25)
    width = int(counts[1:24].argmax()) + 1
    if counts[width] * 2 < n:
        return None
    if counts[width] == n:
        mat = np.frombuffer(joined + b"\x00", dtype=np.uint8).reshape(n, width + 1)[:, :width]
        rows = None
    else:
        rows = np.flatnonzero(lengths == width)
        mat = buf[starts[rows, None] + np.arange(width)]
    m = len(mat)
    first = mat[0]
    dot_cols = np.flatnonzero(first == 46)
    if dot_cols.size > 1:
        return None
    dot = int(dot_cols[0]) if dot_cols.size else -1
    decimals = width - 1 - dot if dot >= 0 else 0
    int_digits = dot if dot >= 0 else width
    if decimals > 3 or int_digits == 0 or (dot >= 0 and decimals == 0) or int_digits + 3 > 19:
        return None
    digit_cols = [j for j in range(width) if j != dot]
    ok = np.ones(m, dtype=bool)
    if dot >= 0:
        ok &= mat[:, dot] == 46
    acc = np.zeros(m, dtype=np.uint64)
    for j in digit_cols:
        d = mat[:, j] - np.uint8(48)  # wraps for bytes below '0'
        ok &= d < 10
        acc *= np.uint64(10)
        acc += d
    acc *= np.uint64(10 ** (3 - decimals))
    ok &= acc <= np.uint64(_INT64_MAX)
    done = np.zeros(n, dtype=bool)
    if rows is None:
        out[:] = np.where(ok, acc, 0).astype(np.int64)
        valid[:] = ok
        done[:] = ok
    else:
        sel = rows[ok]
        out[sel] = acc[ok].astype(np.int64)
        valid[sel] = True
        done[sel] = True
    return done


def _split_to_ns(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """The general fast path: one bytes object per token, parsed by numpy (see :func:`raw_to_ns`)."""
    out, valid, arr = _start(tokens)
    if arr is None:
        return out, valid
    length = np.strings.str_len(arr)
    present = np.flatnonzero(length > 0)
    sub = arr[present]
    dot = np.strings.find(sub, b".")
    decimals = np.where(dot >= 0, length[present] - dot - 1, 0)
    try:
        digits = np.strings.replace(sub, b".", b"", 1).astype(np.int64)
    except (ValueError, OverflowError):
        return _matrix_to_ns(tokens)
    good = decimals <= 3
    for d in range(3):  # fewer than three decimals: scale, unless that would overflow
        sel = decimals == d
        good &= ~sel | (np.abs(digits) <= _MAX_BY_SCALE[d])
    scale = np.array([1000, 100, 10, 1], dtype=np.int64)[np.clip(decimals, 0, 3)]
    out[present] = np.where(good, digits * np.where(good, scale, 1), 0)
    valid[present] = good
    rest = present[~good]
    if rest.size:  # more than three decimals, or too large: the exact general path
        r_out, r_ok = _matrix_to_ns([tokens[i] for i in rest.tolist()])
        out[rest], valid[rest] = r_out, r_ok
    return out, valid


def _matrix_to_ns(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """General exact conversion over a (tokens × characters) digit matrix."""
    out, valid, arr = _start(tokens)
    if arr is None:
        return out, valid
    n, width = len(tokens), arr.dtype.itemsize
    m = arr.view(np.uint8).reshape(n, width)
    is_digit = (m >= 48) & (m <= 57)
    is_dot = m == 46
    is_nul = m == 0
    length = width - is_nul.sum(axis=1)  # S-dtype pads with NUL on the right only
    negative = m[:, 0] == 45
    body_bad = ~(is_digit | is_dot | is_nul)
    body_bad[:, 0] &= ~negative
    dots = is_dot.sum(axis=1)
    dot_at = np.where(dots > 0, is_dot.argmax(axis=1), length)
    cols = np.arange(width, dtype=np.int64)
    int_exp = dot_at[:, None] - 1 - cols[None, :]
    frac_k = cols[None, :] - dot_at[:, None]
    digits = m.astype(np.int64) - 48
    n_int = dot_at - negative
    simple = (~body_bad.any(axis=1)) & (dots <= 1) & (is_digit.sum(axis=1) > 0) & (n_int <= 16)
    lead = m[np.arange(n), np.minimum(negative.astype(np.intp), width - 1)]
    simple &= (n_int < 16) | (lead < 57)  # 16 integer digits fit int64 ns unless they start with 9
    int_sel = is_digit & (int_exp >= 0)
    contrib = np.where(int_sel, digits * _POW10[np.clip(int_exp + 3, 0, 18)], 0)
    frac_sel = is_digit & (frac_k >= 1) & (frac_k <= 3)
    contrib += np.where(frac_sel, digits * _POW10[np.clip(3 - frac_k, 0, 18)], 0)
    contrib += is_digit & (frac_k == 4) & (digits >= 5)
    sums = contrib.sum(axis=1)
    sums = np.where(negative, -sums, sums)
    out[simple] = sums[simple]
    valid[simple] = True
    # the rare rest: exponents, quoted numbers, very long values
    for i in np.flatnonzero(~simple & (length > 0)):
        value = _slow_ns(arr[i])
        if value is not None:
            out[i] = value
            valid[i] = True
    return out, valid


_INT64_MAX = 2**63 - 1


def _slow_ns(text: bytes) -> int | None:
    body = text.strip().strip(b'"')
    if not body or b"_" in body or b" " in body:
        return None
    try:
        d = Decimal(body.decode("ascii")) * 1000
    except (ArithmeticError, UnicodeDecodeError, ValueError):  # InvalidOperation, Overflow
        return None
    if not d.is_finite() or d.adjusted() > 19:  # far beyond int64: don't build a huge integer (1e900000)
        return None
    value = int(d.to_integral_value(rounding="ROUND_HALF_UP"))
    return value if -_INT64_MAX <= value <= _INT64_MAX else None
