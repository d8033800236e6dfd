"""Grafana dashboards of TensorFusion, generated with grafana-foundation-sdk (a development
dependency): `make dashboards` writes them to charts/tensor-fusion/dashboards/."""
