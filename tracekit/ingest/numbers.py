"""Exact conversion of JSON number text (microseconds) to int64 nanoseconds, vectorised.

Kineto writes ``ts`` as microseconds with up to three decimals; epoch-scale values such as
``1712195495519689.047`` have 19 significant digits, more than a float64 holds, so ``ts`` is
decoded as raw text and converted here without any float. A fourth and later decimal rounds
half away from zero. Text that is not a plain decimal (an exponent, a quoted string, junk) is
converted through :class:`decimal.Decimal`, one value at a time; such values are rare.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

import numpy as np

_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
_SEP = 0  # byte that joins the tokens; never occurs inside JSON number text


def raw_to_ns(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """Convert number tokens (bytes-like; empty = missing) to (int64 ns, valid mask)."""
    n = len(tokens)
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if n == 0:
        return out, valid
    arr = np.array([bytes(t) for t in tokens]) if not isinstance(tokens[0], bytes) else np.array(tokens)
    width = arr.dtype.itemsize
    if width == 0:
        return out, valid
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
    if not d.is_finite():
        return None
    value = int(d.to_integral_value(rounding="ROUND_HALF_UP"))
    return value if -_INT64_MAX <= value <= _INT64_MAX else None
