# llm-loadgen image: Locust 2.47 + this repository's locustfile, for distributed runs
# (deploy/compose/, deploy/k8s/). One image serves the master, the workers and the simulator.
#   docker build -t llm-loadgen:0.1.0 .
#   docker run --rm llm-loadgen:0.1.0        # llm-loadgen --help
#   docker run --rm -v "$PWD/results:/app/results" llm-loadgen:0.1.0 --host http://SERVER:PORT
#                                            # the sweep; its run folder lands in ./results
#   docker run --rm llm-loadgen:0.1.0 worker --master-host MASTER   # a worker of a distributed run
#   docker run --rm --entrypoint python llm-loadgen:0.1.0 -m loadgen.sim --host 0.0.0.0
#
# BASE_IMAGE: any Debian-like image with python3 >= 3.11 and its venv module. Without a registry,
# scripts/docker-base-image.sh --import makes one from Debian packages (deploy/README.md).
ARG BASE_IMAGE=python:3.11-slim

# --- build stage: the virtualenv with every dependency --------------------------------------------
# Package-index settings for networks that need them (a mirror, a TLS-inspecting proxy's CA) are
# build arguments of this stage only: the final image copies the venv, not this stage's history,
# so they appear in no layer, no ENV and no `docker history` of the image.
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST: as pip's own variables (empty = unset)
#   PIP_CA_PEM: PEM text of extra CA certificates, trusted beside the base image's own bundle
FROM ${BASE_IMAGE} AS build
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_CA_PEM=
WORKDIR /src
# The installable packages only: this stage reruns when they change, not for a new locustfile.
# Every dependency ships manylinux wheels for Python 3.11, so no compiler is needed.
COPY pyproject.toml ./
COPY loadgen/ loadgen/
COPY shapes/ shapes/
# what loadgen/scenarios, loadgen/grafana and loadgen/docs link to: the installed llm-loadgen carries
# the presets (--scenario smoke), the Grafana kit and the docs
COPY config/ config/
COPY grafana/ grafana/
COPY docs/ docs/
RUN set -eu; \
    [ -n "$PIP_INDEX_URL" ] || unset PIP_INDEX_URL; \
    [ -n "$PIP_EXTRA_INDEX_URL" ] || unset PIP_EXTRA_INDEX_URL; \
    [ -n "$PIP_TRUSTED_HOST" ] || unset PIP_TRUSTED_HOST; \
    if [ -n "$PIP_CA_PEM" ]; then \
        cat /etc/ssl/certs/ca-certificates.crt > /tmp/pip-ca.pem; \
        printf '%s\n' "$PIP_CA_PEM" >> /tmp/pip-ca.pem; \
        export PIP_CERT=/tmp/pip-ca.pem; \
    fi; \
    python3 -m venv /opt/llm-loadgen; \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        /opt/llm-loadgen/bin/pip install . ; \
    /opt/llm-loadgen/bin/pip uninstall -y -q pip setuptools; \
    rm -f /tmp/pip-ca.pem

# --- the image ---------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}

# MPLCONFIGDIR: matplotlib (report plots) wants a writable config dir; /tmp works for any UID.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    PATH=/opt/llm-loadgen/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

COPY --from=build /opt/llm-loadgen /opt/llm-loadgen

# The entry point `llm-loadgen` runs the installed package (/opt/llm-loadgen). /app is a checkout
# beside it: /app/pyproject.toml marks it, which makes config/default.yaml the default scenario,
# and `--entrypoint locust ... -f /app/locustfile.py` still works. Compose and Kubernetes mount the
# run's scenario at /app/config/scenario.yaml.
WORKDIR /app
COPY pyproject.toml locustfile.py ./
COPY loadgen/ loadgen/
COPY shapes/ shapes/
COPY config/ config/

# Numeric non-root user so Kubernetes' runAsNonRoot can verify it (deploy/k8s uses 10001 too).
# /app/results is the results directory (the default --results-dir, cwd /app) that `docker run -v`,
# compose and Kubernetes mount over: a run's folder outlives its container.
RUN groupadd --system --gid 10001 loadgen \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/loadgen loadgen \
 && mkdir -p /app/results \
 && chown 10001:10001 /app/results
USER 10001:10001

# 5557: workers connect to the master; 8089: web UI (not started with --headless);
# 9646: Prometheus exporter (--exporter-port 9646 --exporter-host 0.0.0.0); 8000: simulator.
EXPOSE 5557 8089 9646 8000

ENTRYPOINT ["llm-loadgen"]
CMD ["--help"]
