"""The boundary choice leaves unassembled the candidates that cannot change its answer (boundary._Sure, issue 30),
and the answer is the one of assembling every candidate.

* ``_cover_bound`` is at least every candidate's ``covered``, and ``_no_agreement`` holds only for assemblies whose
  ``agree`` is 0, on the committed fixtures and a generated trace shaped like the benchmark (one step of identical
  layers, every kernel of a layer a candidate).
* On those traces ``choose_boundary`` with the waiting candidates picks the same assembly (token, layers, measures) as
  ``choose_boundary`` assembling every candidate, and on the generated trace candidates wait that the old code
  assembled.
* Candidates that waited while the best share was lower than the final one are assembled after all (``late``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.analyses.categories import resolve_categories
from tracekit.analyses.steps.resolve import find_steps
from tracekit.analyses.structure.layers import auto_main_stream
from tracekit.analyses.structure.layers import boundary as lc
from tracekit.analyses.structure.layers.assembly import assemble
from tracekit.analyses.structure.layers.boundary import _cover_bound, _no_agreement
from tracekit.analyses.structure.layers.segments import phased_segments
from tracekit.analyses.structure.layers.sequences import read_context

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"
FIXTURES = ["dp16_bs4.trace.json.gz", "dsv3_bs32.trace.json.gz", "dp2dcp8_bs64.trace.json.gz"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A small trace from the benchmark's generator: one step of identical layers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from make_trace import make_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    d = tmp_path_factory.mktemp("gen")
    make_trace(d / "t.json", mb=3, events_min=1000, seed=0, gz_path=d / "t.json.gz")
    return d / "t.json.gz"


def _ctx(path: Path):
    trace = tracekit.load(path, cache=False)
    return read_context(trace, find_steps(trace, None), auto_main_stream(trace), resolve_categories(None))


def _paths(generated: Path) -> list[Path]:
    return [SYN / n for n in FIXTURES] + [generated]


def _summary(a):
    if a is None:
        return None
    t = a.table
    return (
        a.token,
        a.covered,
        a.layers_n,
        a.agree,
        a.n_types,
        a.decoder,
        a.k,
        t.step.tolist(),
        t.lo.tolist(),
        t.hi.tolist(),
        t.sig.tolist(),
        t.run.tolist(),
        t.exact.tolist(),
        t.note,
        t.sigs,
    )


def test_bounds_hold_for_every_candidate(generated):
    for path in _paths(generated):
        ctx = _ctx(path)
        roles = lc._roles(ctx)
        for tok in sorted(lc._candidates(ctx)):
            p = phased_segments(ctx, tok)
            bound, none_agree = _cover_bound(ctx, p), _no_agreement(ctx, p, roles)
            a = lc._measure(ctx, assemble(ctx, tok, p))
            assert a.covered <= bound, (path.name, tok)
            for limit in (a.covered, a.covered + 1, bound, bound + 1, 0.9 * bound, ctx.flat.codes.size):
                loose = _cover_bound(ctx, p, limit=limit)  # looser, but deciding `< limit` alike
                assert loose >= bound and (loose < limit) == (bound < limit), (path.name, tok, limit)
            assert not none_agree or a.agree == 0, (path.name, tok)


def test_choice_with_waiting_candidates_is_the_choice_of_all(generated, monkeypatch):
    assembled = []
    real = lc.assemble

    def counting(ctx, tok, p=None):
        assembled.append(tok)
        return real(ctx, tok, p)

    monkeypatch.setattr(lc, "assemble", counting)
    waited = {}
    for path in _paths(generated):
        ctx = _ctx(path)
        assembled.clear()
        got = _summary(lc.choose_boundary(ctx))
        n_new = len(assembled)
        with monkeypatch.context() as m:
            m.setattr(lc._Sure, "waits", lambda self, p, norm: False)  # every candidate assembled, as before
            assembled.clear()
            want = _summary(lc.choose_boundary(ctx))
        assert got == want, path.name
        assert got is not None
        waited[path.name] = len(assembled) - n_new
    assert waited[generated.name] > 0  # candidates the old code assembled wait here


def test_late_candidates_are_assembled():
    class A:  # an assembly as _Sure reads it
        def __init__(self, agree, layers_n, covered):
            self.agree, self.layers_n, self.covered = agree, layers_n, covered

    sure = lc._Sure.__new__(lc._Sure)
    sure.total, sure.built, sure.waiting = 100, [], []
    sure.top, sure.covered, sure.norm_covered, sure.ended = None, -1, -1, False
    sure.add(A(0, 10, 90), norm=False)
    sure.add(A(0, 10, 80), norm=True)
    assert (sure.top, sure.covered, sure.norm_covered, sure.ended) == (0.0, 90, 80, False)
    sure.waiting.append((7, sure.top))  # waited while the best share was 0
    sure.add(A(10, 10, 50), norm=False)  # a stack agreeing everywhere: share 1, the kept ones now cover at most 50
    assert (sure.top, sure.covered, sure.norm_covered) == (1.0, 50, -1)
    assert sure.late(1.0) == [7]
    assert sure.late(0.0) == []
    sure.add(A(10, 10, 95), norm=True)  # a norm covering 95 % with one transition per layer ends the search
    assert (sure.covered, sure.norm_covered, sure.ended) == (95, 95, True)


def test_cover_bound_of_a_token_without_runs_is_zero(generated):
    seen = 0
    for path in [SYN / "dp16_bs4.trace.json.gz", generated]:
        ctx = _ctx(path)
        for tok in sorted(lc._candidates(ctx)):
            p = phased_segments(ctx, tok)
            if not np.any(p.segs.ph >= 0):
                seen += 1
                assert _cover_bound(ctx, p) == 0
                assert assemble(ctx, tok, p).covered == 0
    assert seen  # such tokens exist: they wait whatever the others do
