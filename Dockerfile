# llm-loadgen image: Locust 2.47 + this repository's locustfile, for distributed runs
# (deploy/compose/, deploy/k8s/). One image serves the master, the workers and the simulator.
#   docker build -t llm-loadgen:0.1.0 .
#   docker run --rm llm-loadgen:0.1.0        # locust --help (printed before the locustfile loads,
#                                            # so it omits our options: see loadgen/config.py)
#   docker run --rm llm-loadgen:0.1.0 -f /app/locustfile.py --headless --host http://SERVER:PORT
#   docker run --rm --entrypoint python llm-loadgen:0.1.0 -m loadgen.sim --host 0.0.0.0
FROM python:3.11-slim

# MPLCONFIGDIR: matplotlib (report plots) wants a writable config dir; /tmp works for any UID.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /app

# The installable packages first: this layer (all dependencies) is rebuilt only when they change.
# Every dependency ships manylinux wheels for Python 3.11, so no compiler is needed.
COPY pyproject.toml ./
COPY loadgen/ loadgen/
COPY shapes/ shapes/
RUN pip install . && rm -rf build ./*.egg-info

# Locust puts the locustfile's directory first on sys.path, so /app/loadgen is what runs;
# /app/pyproject.toml marks /app as the checkout, which makes config/default.yaml the default
# scenario. Compose and Kubernetes mount the run's scenario at /app/config/scenario.yaml.
COPY locustfile.py ./
COPY config/ config/

# Numeric non-root user so Kubernetes' runAsNonRoot can verify it (deploy/k8s uses 10001 too).
# /app/results is the results directory (--results-dir) that compose and Kubernetes mount over.
RUN groupadd --system --gid 10001 loadgen \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/loadgen loadgen \
 && mkdir -p /app/results \
 && chown 10001:10001 /app/results
USER 10001:10001

# 5557: workers connect to the master; 8089: web UI (not started with --headless);
# 9646: Prometheus exporter (--exporter-port 9646 --exporter-host 0.0.0.0); 8000: simulator.
EXPOSE 5557 8089 9646 8000

ENTRYPOINT ["locust"]
CMD ["-f", "/app/locustfile.py", "--help"]
