# syntax=docker/dockerfile:1
# vramgate: one image for the webhook, the scheduler extender, the GPU health controller and the
# chart's certificate hook Jobs (`python -m webhook.jobs.certs_job`).
#
#   docker build -t vramgate:0.1.0 .
#   docker run --rm --read-only --tmpfs /tmp -w /tmp -p 8443:8443 vramgate:0.1.0 serve --dev --nodes /path/cluster.yaml
#
# Runs as UID/GID 65532 with a read-only root filesystem: only /tmp must be writable (the chart
# mounts an emptyDir there). Both stages use the same pinned base, so the venv's interpreter
# symlinks resolve in the final stage.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: dependencies in their own layer, then the package ---------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Only pyproject.toml first: this layer (all third-party wheels) is rebuilt only when the
# dependency list changes, not on every code change. Every dependency ships binary wheels for
# CPython 3.11 on amd64/arm64, so no compiler is needed in either stage.
COPY pyproject.toml ./
# The kubernetes client (37.x) ships an asyncio twin of itself, kubernetes/aio (≈68 MB with its
# bytecode), that nothing here imports and nothing in the sync client refers to: dropped.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install --only-binary=:all: -r /tmp/requirements.txt \
 && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio
# Then the package itself (no dependency resolution: they are all installed above).
COPY README.md ./
COPY webhook ./webhook
RUN pip install --no-deps . \
 && pip uninstall -y pip setuptools wheel \
 && python -m compileall -q /opt/venv/lib \
 && vramgate --help > /dev/null

# ---- final: the venv on a clean base, no build tools ------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="vramgate" \
      org.opencontainers.image.description="VRAM-aware Kubernetes admission webhook, scheduler extender and GPU health controller" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
USER 65532:65532
EXPOSE 8443 8444
ENTRYPOINT ["vramgate"]
CMD ["serve"]
