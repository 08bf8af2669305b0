"""`annotate`'s output trace gets the `trustworthy` verdict its input gets (issue 41): the tracks it adds (category
"tracekit") counted as recorded activity, so a step whose marker runs past the end of the recording looked
recorded in the annotated trace."""

from __future__ import annotations

import json

import pytest

from tests.conftest import gpu_ann, kernel, write_trace


def _verdict(cli, path) -> tuple[bool, list]:
    code, out, err = cli("steps", path, "-f", "json", "--no-cache")
    assert code == 0, err
    s = json.loads(out)["summary"]
    return s["trustworthy"], [r.split(":")[0] for r in s["reasons"]]


@pytest.mark.slow
def test_a_step_past_the_recording_stays_untrustworthy_once_annotated(tmp_path, cli):
    evs = []
    for i, t0 in enumerate((0.0, 20_000.0, 40_000.0)):
        # the last marker runs 200 ms past its kernels: the profile stopped inside it
        evs.append(gpu_ann("scheduler.run_batch", t0, 15_000.0 if i < 2 else 200_000.0, ext=i + 1))
        evs += [kernel(f"gemm_{j}", t0 + 100.0 + 1000.0 * j, 800.0, corr=10 * i + j) for j in range(10)]
    src = write_trace(tmp_path / "t.json", evs)
    before = _verdict(cli, src)
    assert before == (False, ["within_recording"])
    out = tmp_path / "annotated.json"
    code, _, err = cli("annotate", src, "-o", out, "--no-cache")
    assert code == 0, err
    assert _verdict(cli, out) == before


@pytest.mark.slow
def test_a_trustworthy_trace_stays_trustworthy_once_annotated(tmp_path, cli):
    evs = []
    for i, t0 in enumerate((0.0, 20_000.0, 40_000.0)):
        evs.append(gpu_ann("scheduler.run_batch", t0, 15_000.0, ext=i + 1))
        evs += [kernel(f"gemm_{j}", t0 + 100.0 + 1000.0 * j, 800.0, corr=10 * i + j) for j in range(10)]
    src = write_trace(tmp_path / "t.json", evs)
    out = tmp_path / "annotated.json.gz"
    assert cli("annotate", src, "-o", out, "--no-cache")[0] == 0
    assert _verdict(cli, src) == _verdict(cli, out) == (True, [])
