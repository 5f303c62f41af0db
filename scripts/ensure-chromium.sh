#!/bin/sh
# Headless Chromium for the report and web-UI rendering tests.
exec "$(dirname "$0")/ensure-debian-package.sh" chromium chromium "the report and web-UI rendering tests"
