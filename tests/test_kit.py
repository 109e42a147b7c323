"""The studies' view of claims.csv: a section's rows under the names the verdict macros read."""

from __future__ import annotations

import pandas as pd

from mathrl import claims
from mathrl.studies.kit import claim_frame, power_note, verdict_rows


def test_a_sections_claims_as_verdict_rows():
    runs = pd.DataFrame({"variant": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "acc": [0.3, 0.4, 0.35, 0.1, 0.2, 0.15], "fall": 0.0})
    decl = [{"id": "helps", "kind": "document", "statement": "a beats b", "measure": "acc", "table": "t", "section": "s",
             "a": {"variant": "a"}, "b": {"variant": "b"}},
            {"id": "waits", "kind": "document", "statement": "a beats b after a fall", "measure": "acc", "table": "t", "section": "s",
             "a": {"variant": "a"}, "b": {"variant": "b"},
             "checks": [{"type": "failure", "label": "fall (b)", "measure": "fall", "arm": "b", "at_least": 0.5}]},
            {"id": "elsewhere", "kind": "document", "statement": "x", "measure": "acc", "table": "t", "section": "other", "a": {}}]  # fmt: skip
    rows = [claims.judge_claim(claims.parse(d, d["id"]), {"t": runs}, {}) for d in decl]
    t = {"claims": claims.adjust(pd.DataFrame(rows, columns=claims.COLUMNS + claims.EXTRA))}
    view = claim_frame(t, "s")
    assert list(view["key"]) == ["helps", "waits"]
    out = verdict_rows(view)
    assert out[0]["outcome"] == "agrees" and "95% CI [" in out[0]["sentence"] and "n=3 seeds, paired" in out[0]["sentence"]
    assert out[1]["sentence"].startswith("Not judged: failure not established: fall (b) not established: fall 0 (needs >= 0.5)")
    assert "1 agrees" in power_note(view) and "1 not judged" in power_note(view)
