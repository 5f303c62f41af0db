#!/bin/sh
# nginx for the client ingest benchmark (bench/flood.py): a static SSE body it serves is a token
# source far faster than any Python client, so it never limits the figure.
exec "$(dirname "$0")/ensure-debian-package.sh" nginx nginx "the ingest benchmark (make bench)"
