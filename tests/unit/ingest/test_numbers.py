"""Tests for tracekit.ingest.numbers.raw_to_ns: JSON number text (µs) → exact int64 ns.

Hand cases plus hypothesis properties checked against an exact :class:`decimal.Decimal`
computation (µs × 1000, a fourth and later decimal rounding half away from zero).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.ingest.numbers import raw_to_ns

INT64_MAX = 2**63 - 1
HSETTINGS = settings(max_examples=300, deadline=None)


def exact_ns(text: str) -> int:
    """The reference: Decimal µs × 1000, rounded half away from zero."""
    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def one(token: bytes) -> tuple[int, bool]:
    out, valid = raw_to_ns([token])
    assert out.dtype == np.int64 and valid.dtype == bool
    assert out.shape == valid.shape == (1,)
    return int(out[0]), bool(valid[0])


# ---------------------------------------------------------------------------
# hand cases
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token, ns",
    [
        # epoch-scale µs with 3 decimals: 19 significant digits, beyond float64
        (b"1712195495519689.047", 1712195495519689047),
        (b"1712195495519689.001", 1712195495519689001),
        (b"1712195495519689.999", 1712195495519689999),
        (b"4458676422880181.123", 4458676422880181123),
        # integers
        (b"0", 0),
        (b"7", 7000),
        (b"1682725898082228", 1682725898082228000),
        (b"8999999999999999", 8999999999999999000),  # 16 digits not starting with 9: fast path
        (b"9000000000000000", 9000000000000000000),  # 16 digits starting with 9: exact path
        # fewer than 3 decimals
        (b"12.5", 12500),
        (b"12.05", 12050),
        (b"0.001", 1),
        (b"3.0", 3000),
        # negative
        (b"-1", -1000),
        (b"-1.5", -1500),
        (b"-0.001", -1),
        (b"-1712195495519689.047", -1712195495519689047),
        (b"-0", 0),
        # a fourth decimal rounds half away from zero
        (b"0.0005", 1),
        (b"0.0004", 0),
        (b"0.00049999", 0),
        (b"0.00050001", 1),
        (b"1.2345", 1235),
        (b"1.2344999", 1234),
        (b"1.2349", 1235),
        (b"-0.0005", -1),
        (b"-0.0004", 0),
        (b"-1.2345", -1235),
        (b"-1.2344", -1234),
        (b"1712195495519689.0475", 1712195495519689048),
        (b"1712195495519689.9995", 1712195495519690000),  # carry into the integer part
        (b"8999999999999999.9995", 9000000000000000000),
        # exponent form
        (b"1e3", 1_000_000),
        (b"1E3", 1_000_000),
        (b"1.5e-3", 2),  # 1.5 ns rounds half away from zero
        (b"-1.5e-3", -2),
        (b"2.5e-3", 3),
        (b"1e-4", 0),
        (b"1.712195495519689047e15", 1712195495519689047),
        (b"0e10", 0),
        # quoted number text
        (b'"12.5"', 12500),
        (b'"1712195495519689.047"', 1712195495519689047),
        (b'"-3"', -3000),
        # leading zeros
        (b"007", 7000),
        (b"000.5", 500),
        (b"0000000000000000001.5", 1500),  # 19 integer digits, all but one zeros
        (b"-0007.25", -7250),
        # the int64 limit itself is still valid
        (b"9223372036854775.807", INT64_MAX),
        (b"-9223372036854775.807", -INT64_MAX),
        (b"9223372036854775.8069", INT64_MAX),
    ],
)
def test_valid_tokens(token, ns):
    assert one(token) == (ns, True)


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"abc",
        b"1.2.3",
        b"--1",
        b"1-2",
        b"1e",
        b"e3",
        b"0x10",
        b".",
        b"nan",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"inf",
        b"true",
        b"null",
        b'""',
        b'"abc"',
        b"\xff\xfe",
        b"12abc",
    ],
)
def test_junk_and_empty_are_invalid(token):
    assert one(token) == (0, False)


@pytest.mark.parametrize(
    "token",
    [
        b"9223372036854775.808",  # INT64_MAX + 1 ns
        b"9223372036854775.8075",  # rounds up past the limit
        b"9300000000000000",
        b"99999999999999999999",
        b"-9223372036854775.809",
        b"-99999999999999999999",
        b"1e16",
        b"1e300",
        b'"1e300"',
    ],
)
def test_int64_overflow_is_invalid(token):
    assert one(token) == (0, False)


@pytest.mark.parametrize("token", [b"1e999999", b"1e1000000", b"-1e999999", b'"1e999999"'])
def test_huge_exponent_is_invalid_not_a_crash(token):
    assert one(token) == (0, False)


@pytest.mark.parametrize("tokens", [[b"-"], [b"-", b"5"], [b"5", b"-", b""]])
def test_lone_minus_is_invalid_not_a_crash(tokens):
    out, valid = raw_to_ns(tokens)
    assert not valid[tokens.index(b"-")]


def test_lone_minus_in_a_wider_batch_is_invalid():
    out, valid = raw_to_ns([b"-", b"12"])
    assert valid.tolist() == [False, True]
    assert out[1] == 12000


def test_empty_input():
    out, valid = raw_to_ns([])
    assert out.dtype == np.int64 and valid.dtype == bool
    assert out.shape == valid.shape == (0,)


def test_all_empty_tokens():
    out, valid = raw_to_ns([b"", b"", b""])
    assert out.tolist() == [0, 0, 0]
    assert valid.tolist() == [False, False, False]


def test_mixed_batch_keeps_positions():
    tokens = [b"1712195495519689.047", b"", b"1e3", b"junk", b'"12.5"', b"-0.0005", b"9300000000000000", b"7"]
    out, valid = raw_to_ns(tokens)
    assert valid.tolist() == [True, False, True, False, True, True, False, True]
    assert out.tolist() == [1712195495519689047, 0, 1_000_000, 0, 12500, -1, 0, 7000]


def test_msgspec_raw_and_other_bytes_like_tokens():
    # kineto/columns.py passes msgspec.Raw slices; they go through bytes(t)
    raws = [msgspec.Raw(b"1712195495519689.047"), msgspec.Raw(b""), msgspec.Raw(b"2.5")]
    out, valid = raw_to_ns(raws)
    assert valid.tolist() == [True, False, True]
    assert out[0] == 1712195495519689047 and out[2] == 2500
    out, valid = raw_to_ns([bytearray(b"1.5"), memoryview(b"-2")])
    assert valid.tolist() == [True, True]
    assert out.tolist() == [1500, -2000]


def test_raw_tokens_from_a_real_document_are_exact():
    doc = b'[{"ts": 1712195495519689.047}, {"ts": 1712195495519689.048}, {"ts": 12}, {}]'

    class Ev(msgspec.Struct):
        ts: msgspec.Raw = msgspec.Raw(b"")

    events = msgspec.json.decode(doc, type=list[Ev])
    out, valid = raw_to_ns([e.ts for e in events])
    assert valid.tolist() == [True, True, True, False]
    assert out[:3].tolist() == [1712195495519689047, 1712195495519689048, 12000]
    assert out[1] - out[0] == 1  # a float64 would make these equal


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------


@st.composite
def decimal_text(draw, max_int=9 * 10**15 - 1, max_decimals=3, signed=False):
    whole = draw(st.integers(min_value=0, max_value=max_int))
    k = draw(st.integers(min_value=0, max_value=max_decimals))
    text = str(whole)
    if k:
        frac = draw(st.integers(min_value=0, max_value=10**k - 1))
        text += "." + str(frac).zfill(k)
    if signed and draw(st.booleans()):
        text = "-" + text
    return text


@pytest.mark.slow
@HSETTINGS
@given(decimal_text())
def test_property_matches_exact_decimal(text):
    assert one(text.encode()) == (exact_ns(text), True)


@pytest.mark.slow
@HSETTINGS
@given(decimal_text(max_decimals=8, signed=True))
def test_property_signed_and_extra_decimals_round_half_away_from_zero(text):
    assert one(text.encode()) == (exact_ns(text), True)


@pytest.mark.slow
@HSETTINGS
@given(st.lists(st.one_of(decimal_text(signed=True), st.just("")), max_size=40))
def test_property_mixed_valid_and_empty_stay_aligned(texts):
    out, valid = raw_to_ns([t.encode() for t in texts])
    assert out.shape == valid.shape == (len(texts),)
    assert valid.tolist() == [t != "" for t in texts]
    assert out.tolist() == [exact_ns(t) if t else 0 for t in texts]


@pytest.mark.slow
@HSETTINGS
@given(
    st.lists(
        st.one_of(
            decimal_text(max_decimals=5, signed=True),
            st.just(""),
            st.sampled_from(["1e3", '"12.5"', "junk", "9300000000000000", "0007.5"]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_property_each_token_is_independent_of_its_batch(texts):
    tokens = [t.encode() for t in texts]
    out, valid = raw_to_ns(tokens)
    for i, tok in enumerate(tokens):
        assert (int(out[i]), bool(valid[i])) == one(tok)
