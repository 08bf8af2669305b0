"""The findings' text clipper and the layer types' identifier stem do two jobs and are named for them (they were both
``_short_name``): ``findings.rules.clip_text`` keeps any text whole and marks a cut with "…";
``structure.layers.type_names._identifier_prefix`` takes a kernel name's last identifier and cuts it unmarked."""

from __future__ import annotations

from tracekit.analyses.findings import rules
from tracekit.analyses.structure.layers import type_names

NAME = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>>(int, long*)"


def test_one_name_for_each_job():
    assert not hasattr(rules, "_short_name") and not hasattr(type_names, "_short_name")


def test_clip_text_keeps_the_text_and_marks_a_cut():
    assert rules.clip_text("aten::mm", 40) == "aten::mm"
    cut = rules.clip_text(NAME, 40)
    assert len(cut) == 40 and cut.endswith("…") and NAME.startswith(cut[:-1])
    assert rules.clip_text("x" * 60) == "x" * 60 and len(rules.clip_text("x" * 61)) == 60


def test_identifier_prefix_is_the_kernel_identifier_cut_unmarked():
    assert type_names._identifier_prefix(NAME) == "vectorized_elementwise_kernel"
    assert type_names._identifier_prefix(NAME, 10) == "vectorized"
