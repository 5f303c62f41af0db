#!/bin/sh
# Prometheus for the dashboard integration test (tests/promtools.py).
exec "$(dirname "$0")/ensure-debian-package.sh" prometheus prometheus "the dashboard integration test"
