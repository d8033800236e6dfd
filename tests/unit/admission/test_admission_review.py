"""The AdmissionReview answer keeps each warning within what the API server passes on whole."""

from __future__ import annotations

from tensorfusion.domain.admission.decision import AdmissionDecision, AdmissionOutcome
from tensorfusion.domain.admission.review import MAX_WARNING_LENGTH, review_answer


def test_a_long_warning_keeps_its_start_and_a_short_one_is_whole() -> None:
    long = "random index 17 used: the leader did not answer (" + "x" * 400 + ")"
    decision = AdmissionDecision(allowed=True, outcome=AdmissionOutcome.UNTOUCHED,
                                 warnings=("short", long))  # fmt: skip
    warnings = review_answer("u", decision)["response"]["warnings"]
    assert warnings[0] == "short"
    assert len(warnings[1]) == MAX_WARNING_LENGTH == 256
    assert warnings[1].startswith("random index 17 used") and warnings[1].endswith("…")
