# syntax=docker/dockerfile:1
# Node-agent image tensorfusion/tensor-fusion-hypervisor (docs/images.md): the `tensor-fusion`
# package (with nvidia-ml-py for NVML), run as `tensor-fusion hypervisor`. The same image runs
# the agent pod's init container `init-shm` (`sh -c "mkdir ...; grep ... /proc/mounts || mount
# -t tmpfs ..."`). The NVIDIA driver's libnvidia-ml.so.1 is not in the image: the NVIDIA
# container runtime puts the host's into the container at run time.
# Build from the repository root: docker build -f images/hypervisor.Dockerfile . (or `make images`).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

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
LABEL org.opencontainers.image.title="tensor-fusion-hypervisor" \
      org.opencontainers.image.description="TensorFusion for Python: node agent (GPU discovery over NVML, device plugin, metrics)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=python-package /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

# Fails the build when a tool of the init container is missing (Debian's slim base has them all)
# or the package (with pynvml) does not import.
RUN for tool in sh mkdir grep mount cp; do \
        command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }; \
    done \
    && tensor-fusion --help >/dev/null \
    && python -c "import pynvml"

# Root: the agent pod is privileged (host paths, device-plugin socket, the tmpfs mount).
# Health and readiness on HYPERVISOR_PORT (8000 by default).
EXPOSE 8000
CMD ["tensor-fusion", "hypervisor"]
