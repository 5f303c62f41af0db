#!/bin/sh
# nginx for the client ingest benchmark (bench/flood.py): a static SSE body it serves is a token
# source far faster than any Python client, so it never limits the figure. Also the router of the
# replicas integration test (tests/support/nginx.py): least_conn in front of simulator replicas.
exec "$(dirname "$0")/ensure-debian-package.sh" nginx nginx "the ingest benchmark (make bench) and the replicas router test"
