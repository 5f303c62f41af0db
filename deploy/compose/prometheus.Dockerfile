# Prometheus from Debian's own package, for machines that reach Debian's mirror but no container
# registry (prom/prometheus cannot be pulled there). Same flags and paths as the official image, so
# docker-compose.yml runs either one (PROMETHEUS_IMAGE in .env):
#   docker build -f deploy/compose/prometheus.Dockerfile \
#       --build-arg BASE_IMAGE=llm-loadgen-base:bookworm-KEY -t llm-loadgen-prometheus:2.42 deploy/compose
# BASE_IMAGE: a Debian bookworm image with apt (scripts/docker-base-image.sh --import makes one).
ARG BASE_IMAGE=debian:bookworm-slim

# --- build stage: apt installs the package; only its files go on ----------------------------------
# APT_OPTS: options this network needs for apt (e.g. -o Acquire::http::Proxy=...), build stage only:
# the image copies files from here, so they appear in none of its layers or its history.
FROM ${BASE_IMAGE} AS build
ARG APT_OPTS=
# No init system in a build container: deny service starts during the install (exit 101).
# Unpinned on purpose: bookworm's security updates replace the version (2.42.0+ds-5+deb12u1 now).
# hadolint ignore=DL3008
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 755 /usr/sbin/policy-rc.d \
 && apt-get $APT_OPTS update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get $APT_OPTS install -y -qq --no-install-recommends prometheus \
 && /usr/bin/prometheus --version

# --- the image ---------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
COPY --from=build /usr/bin/prometheus /usr/bin/promtool /usr/bin/
COPY --from=build /usr/share/prometheus /usr/share/prometheus
COPY --from=build /etc/prometheus /etc/prometheus
# nobody, like the official image; /prometheus is the TSDB (a named volume in compose).
RUN mkdir -p /prometheus && chown 65534:65534 /prometheus
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
