"""Pure admission core: classification, validation, resolution and mutation of pods.

`facts_needed(pod)` → the shell gathers an `AdmissionFacts` (typed objects; `load_facts` builds
one from raw JSON, keeping objects that do not load as `InvalidObject`) → `admit(pod, facts)` →
`AdmissionDecision` (answer, JSON patch, warnings, writes to perform). `PodPreparer` is the dry
run behind `simulate-schedule` and the simulator; `PodIndexCounter` the cyclic index behind
`assign-index`.
"""

from tensorfusion.domain.admission.auto_migration import AutoMigrationConfig, read_auto_migration
from tensorfusion.domain.admission.decision import AdmissionDecision, AdmissionOutcome
from tensorfusion.domain.admission.dry_run import PodPreparer, PreparationError, PreparedPod
from tensorfusion.domain.admission.facts import (
    AdmissionFacts,
    FactNeeds,
    InvalidObject,
    facts_needed,
)
from tensorfusion.domain.admission.facts_loading import (
    load_facts,
    read_object,
    read_profile_object,
)
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.admission.pod_index import PodIndexCounter
from tensorfusion.domain.admission.replica_gate import CounterIncrement, MissingFactError
from tensorfusion.domain.admission.workload import WorkloadWrite
from tensorfusion.domain.admission.workload_identity import owner_key
from tensorfusion.domain.annotation_errors import AnnotationError, Code, Problem

__all__ = [
    "AdmissionDecision",
    "AdmissionFacts",
    "AdmissionOutcome",
    "AnnotationError",
    "AutoMigrationConfig",
    "Code",
    "CounterIncrement",
    "FactNeeds",
    "InvalidObject",
    "MissingFactError",
    "PodIndexCounter",
    "PodPreparer",
    "PreparationError",
    "PreparedPod",
    "Problem",
    "WorkloadWrite",
    "admit",
    "facts_needed",
    "load_facts",
    "owner_key",
    "read_auto_migration",
    "read_object",
    "read_profile_object",
]
