# TensorFusion for Python. `make demo` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: lock demo dev dev-down test test-unit test-integration test-cluster test-e2e e2e e2e-images lint format bench crds venv system-deps testenv images metrics-doc clean dashboards

# Every dependency from the lock file, each checked against its hashes (docs/security.md,
# "Supply chain"); then the package itself without resolving anything again.
$(VENV)/.installed: pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements/dev.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

## Re-pin requirements/*.lock (with hashes) to the versions of the current venv; run after
## changing the dependencies of pyproject.toml and testing them.
lock: venv
	bash scripts/lock-dependencies.sh

venv: $(VENV)/.installed

## The main job on its embedded default: the simulator on the bundled example cluster and trace.
demo: venv
	$(BIN)/tensor-fusion simulate examples/cluster.yaml examples/workload.yaml

## The real system on this machine: control plane, chart, two controllers, simulated GPU nodes
## (docs/dev.md); `make dev-down` stops it.
dev: venv system-deps testenv
	$(BIN)/tensor-fusion dev up

dev-down: venv
	$(BIN)/tensor-fusion dev down

## Every test tier: unit, integration (real Alertmanager, MariaDB), cluster (real control plane),
## e2e (the images on real nodes: kubelet, containerd; needs root).
test: venv system-deps testenv e2e-images
	$(PY) -m pytest -q

test-unit: venv
	$(PY) -m pytest -q tests/unit

test-integration: venv system-deps
	$(PY) -m pytest -q tests/integration

test-cluster: venv testenv
	$(PY) -m pytest -q tests/cluster

## The e2e tier alone: images from Debian bases, a two-node cluster in network namespaces of
## its own (docs/testing.md, "Real nodes").
e2e test-e2e: venv system-deps testenv e2e-images
	$(PY) -m pytest -q tests/e2e

e2e-images:
	$(MAKE) images BASE=debian

## Debian packages the integration tier runs for real (installs only what is missing).
system-deps:
	bash scripts/install-system-deps.sh

## Control-plane binaries built from Go modules, cached under ~/.cache (see docs/testing.md).
testenv:
	bash testenv/build.sh

lint: venv
	$(BIN)/ruff check src tests bench dashboards
	$(BIN)/ruff format --check src tests bench dashboards
	$(BIN)/mypy src tests bench
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff format src tests bench dashboards
	$(BIN)/ruff check --fix src tests bench dashboards

## The Grafana dashboards the chart ships (charts/tensor-fusion/dashboards/*.json), generated
## from dashboards/ with grafana-foundation-sdk (docs/observability.md).
dashboards: venv
	$(PY) -m dashboards.generate

bench: venv
	$(PY) bench/scheduling.py
	$(PY) bench/alerts.py

## Regenerate the "Tables" section of docs/metrics.md from the metrics schema.
metrics-doc: venv
	$(PY) scripts/metrics_doc.py docs/metrics.md

## Regenerate the CRD manifests of the chart from the models.
crds: venv
	$(BIN)/tensor-fusion gen-crds --output charts/tensor-fusion/crds

VERSION = $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
REGISTRY ?=
ENGINE ?=
IMAGE_PREFIX = $(if $(REGISTRY),$(patsubst %/,%,$(REGISTRY))/)tensorfusion

## Controller and node-agent container images, tagged with the package version, with Docker,
## podman or buildah; BASE=debian makes the bases from Debian packages and adds the Alertmanager
## image (docs/images.md).
BASE ?= registry
images:
	VERSION=$(VERSION) IMAGE_PREFIX=$(IMAGE_PREFIX) BASE=$(BASE) ENGINE=$(ENGINE) bash images/build.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
