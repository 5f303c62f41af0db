#!/bin/sh
# nginx for the replicas integration test (tests/support/nginx.py): a least_conn router in front of
# simulator replicas, started by the test on a free 127.0.0.1 port.
exec "$(dirname "$0")/ensure-debian-package.sh" nginx nginx "the replicas router test"
