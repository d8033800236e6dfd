# syntax=docker/dockerfile:1
# Controller image tensorfusion/tensor-fusion-operator (docs/images.md): the `tensor-fusion`
# package, /manager (the chart's controller command) and the kube-scheduler that the controller
# runs as its child, built from the same Go module and version as the test control plane.
# Build from the repository root: docker build -f images/controller.Dockerfile . (or `make images`).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG GO_IMAGE=golang:1.26.8-bookworm

# ---------------------------------------------------------------- kube-scheduler
# The recipe of testenv/build.sh (build_kubernetes), for cmd/kube-scheduler only: the committed
# wrapper module testenv/kubernetes/go.mod + go.sum (k8s.io/kubernetes at KUBERNETES_VERSION of
# testenv/versions.env, its staging modules pinned by replace lines), the same environment
# (check_go), the same flags and version stamps (stamp_flags).
FROM ${GO_IMAGE} AS kube-scheduler
ENV GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
WORKDIR /src/testenv/kubernetes
COPY testenv/versions.env /src/testenv/versions.env
COPY testenv/kubernetes/go.mod testenv/kubernetes/go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    . /src/testenv/versions.env; \
    minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2); \
    flags="-s -w"; \
    for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do \
        flags="$flags -X $package.gitVersion=$KUBERNETES_VERSION -X $package.gitMajor=1"; \
        flags="$flags -X $package.gitMinor=$minor -X $package.gitTreeState=clean"; \
    done; \
    go build -trimpath -ldflags "$flags" -o /out/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler; \
    built=$(/out/kube-scheduler --version); \
    [ "$built" = "Kubernetes $KUBERNETES_VERSION" ] || \
        { echo "kube-scheduler --version says '$built', expected 'Kubernetes $KUBERNETES_VERSION'" >&2; exit 1; }

# ---------------------------------------------------------------- Python package
FROM ${PYTHON_IMAGE} AS python-package
# Set (images/build.sh does), pip compiles .pyc files with hash-based checks instead of the
# install time: the same sources give the same layer.
ARG SOURCE_DATE_EPOCH
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY pyproject.toml README.md /src/
COPY requirements/runtime.lock /src/requirements/runtime.lock
COPY src /src/src
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/venv/bin/pip install --require-hashes -r /src/requirements/runtime.lock \
    && /opt/venv/bin/pip install --no-deps /src

# ---------------------------------------------------------------- image
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="tensor-fusion-operator" \
      org.opencontainers.image.description="TensorFusion for Python: controller, admission webhook, scheduler extender and kube-scheduler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed non-root user (numeric, so runAsNonRoot can check it); the embedded store's default
# directory is writable by it also when no emptyDir is mounted there.
RUN groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/nonroot \
        --shell /usr/sbin/nologin nonroot \
    && mkdir -p /var/lib/tensor-fusion/tsdb \
    && chown -R 65532:65532 /var/lib/tensor-fusion

COPY --from=python-package /opt/venv /opt/venv
COPY --from=kube-scheduler /out/kube-scheduler /usr/local/bin/kube-scheduler
COPY --chmod=0755 images/manager /manager

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# Fails the build when the package does not import or the binary is missing.
RUN tensor-fusion --help >/dev/null && kube-scheduler --version

USER 65532:65532
WORKDIR /home/nonroot
# API 8080, probes 8081, metrics 9000 (with -metrics-bind-address :9000), webhook 9443.
EXPOSE 8080 8081 9000 9443
# CMD, not ENTRYPOINT: the chart's `command` (/manager ...) and the uninstall Job's
# (tensor-fusion uninstall) both replace it, whether given as command or args.
CMD ["/manager"]
