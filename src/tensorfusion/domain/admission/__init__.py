"""Pure admission core: classification, validation, resolution and mutation of pods.

`facts_needed(pod)` → the shell gathers an `AdmissionFacts` → `admit(pod, facts)` →
`AdmissionDecision` (answer, JSON patch, warnings, writes to perform).
"""

from tensorfusion.domain.admission.decision import AdmissionDecision, Outcome
from tensorfusion.domain.admission.facts import AdmissionFacts, FactNeeds, facts_needed
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.admission.replica_gate import CounterIncrement, MissingFactError
from tensorfusion.domain.admission.workload import WorkloadWrite
from tensorfusion.domain.admission.workload_identity import owner_key
from tensorfusion.domain.annotation_errors import AnnotationError, Code, Problem

__all__ = [
    "AdmissionDecision",
    "AdmissionFacts",
    "AnnotationError",
    "Code",
    "CounterIncrement",
    "FactNeeds",
    "MissingFactError",
    "Outcome",
    "Problem",
    "WorkloadWrite",
    "admit",
    "facts_needed",
    "owner_key",
]
