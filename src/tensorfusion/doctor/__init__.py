"""`tensor-fusion doctor`: the live checks against a cluster and the report (doctor.md)."""
