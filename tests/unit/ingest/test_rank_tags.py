"""The one rank-tag grammar of file names (tracekit.ingest.discover.rank_tags): what the sweep's ``--rank`` filter
and the ranks of one run (analyses/fleet/multirank) both read, the union of the two grammars they once had."""

from __future__ import annotations

import pytest

from tracekit.analyses.fleet.multirank.discover import find_ranks
from tracekit.ingest.discover import discover_all, rank_tags, rank_tags_text


@pytest.mark.parametrize(
    "name, tags",
    [
        # sglang's own names: -KIND-N in any order, with or without a stage after
        ("1758612345.12-TP-3-DP-1-EP-3-DECODE.trace.json.gz", {"TP": 3, "DP": 1, "EP": 3}),
        ("x-TP-3-DP-3-EP-3-decode", {"TP": 3, "DP": 3, "EP": 3}),
        ("p-DP-1-TP-3.trace.json.gz", {"DP": 1, "TP": 3}),
        ("p-PP-1-TP-12.trace.json.gz", {"PP": 1, "TP": 12}),
        # every kind, and ATTN_CP however it is written
        ("p-TP-5-ATTN_CP-2-PP-1.trace.json.gz", {"TP": 5, "ATTN_CP": 2, "PP": 1}),
        ("p-TP-5-ATTN-CP-2.json", {"TP": 5, "ATTN_CP": 2}),
        ("p-TP-5-ATTNCP-2.json", {"TP": 5, "ATTN_CP": 2}),
        ("p-TP-7-DCP-3.json", {"TP": 7, "DCP": 3}),
        ("p-TP-7-CP-3.json", {"TP": 7, "CP": 3}),
        # `_` between kind and number, and a tag at the start of the name or after `_` or `.`
        ("p_TP_3_DP_1.json", {"TP": 3, "DP": 1}),
        ("TP-0.trace.json", {"TP": 0}),
        ("run.EP-4.json", {"EP": 4}),
        # not tags: glued to a letter before, no number, lower case, a batch size / context point name
        ("p-XTP-3.json", {}),
        ("p-STEP-3.json", {}),
        ("p-TP-x.json", {}),
        ("p-tp-3.json", {}),
        ("d_bs16_100k.trace.json.gz", {}),
        ("host_1234.1700000000.pt.trace.json", {}),
    ],
)
def test_rank_tags_grammar(name, tags):
    got = rank_tags(name)
    assert got == tags
    assert list(got) == list(tags)  # in the order the name writes them


def test_a_tag_written_twice_keeps_the_last_and_the_text_round_trips():
    assert rank_tags("a-TP-1-b-TP-2.json") == {"TP": 2}
    assert rank_tags_text({"DP": 1, "TP": 3}) == "DP-1-TP-3" and rank_tags_text({}) == ""
    for tags in ({"TP": 3, "DP": 1, "EP": 3}, {"ATTN_CP": 2, "PP": 0}, {"DCP": 7}):
        assert rank_tags(rank_tags_text(tags)) == tags


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"traceEvents": [], "file": "%s"}' % path.name)  # two ranks never share bytes
    return path


def test_the_sweep_and_the_run_of_ranks_read_the_same_tags(tmp_path):
    """A name only the multi-rank grammar once read (``ATTN_CP``, ``_`` separators) is a rank to both callers."""
    names = ["p-TP_0-ATTN_CP-0.json", "p-TP_1-ATTN_CP-1.json", "p-TP_2-ATTN_CP-0.json"]
    for n in names:
        _touch(tmp_path / "d_bs8_1k" / n)
    refs, skipped = discover_all(tmp_path, rank="TP-1-ATTN_CP-1")
    assert [r.path.name for r in refs] == ["p-TP_1-ATTN_CP-1.json"] and refs[0].rank_label == "TP-1-ATTN_CP-1"
    assert len(skipped) == 2 and all("another rank" in why for _, why in skipped)
    ranks, _ = find_ranks(tmp_path)
    assert [(rf.rank, rf.files[0].name, rf.tags) for rf in ranks] == [(i, n, rank_tags(n)) for i, n in enumerate(names)]
