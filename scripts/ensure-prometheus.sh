#!/bin/sh
# Prometheus for the dashboard integration test (tests/support/promtools.py).
exec "$(dirname "$0")/ensure-debian-package.sh" prometheus prometheus "the dashboard integration test"
