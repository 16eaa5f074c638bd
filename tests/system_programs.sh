#!/usr/bin/env bash
# The programs the tests run that are not Python packages, installed from Debian's packages when
# missing (`make test` runs this first; a second run does nothing):
#   kcat                    kcat        tests/integration/test_security.py
#   java, javac             openjdk-17-jdk-headless   the reference Kafka (tests/kafka_ref), Spark
#   mvn                     maven       Kafka's jars and Spark's connector from Maven Central
#   node, npm               nodejs npm  kafkajs (tests/integration/test_node_clients.py)
# Only a missing program's package is installed, with apt-get when run as root (after
# `apt-get update` when the package lists do not have it yet, as on a fresh machine). Otherwise one
# line on stderr names the packages to install; the tests that need them skip (fail under CI=true).
# Exit status 0 either way: the tests report what is missing.
set -uo pipefail
programs=${MINIBROKER_TEST_PROGRAMS:-"kcat=kcat java=openjdk-17-jdk-headless javac=openjdk-17-jdk-headless mvn=maven node=nodejs npm=npm"}
apt_get=${APT_GET:-apt-get}

missing=()
for pair in $programs; do
    program=${pair%%=*} package=${pair#*=}
    if ! command -v "$program" >/dev/null 2>&1 && [[ " ${missing[*]} " != *" $package "* ]]; then
        missing+=("$package")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v "$apt_get" >/dev/null 2>&1; then
    echo "make: the tests need Debian's packages ${missing[*]} (not root with apt-get here: sudo apt-get install ${missing[*]}); their tests skip until then" >&2
    exit 0
fi
echo "make: installing Debian's packages ${missing[*]} for the tests" >&2
export DEBIAN_FRONTEND=noninteractive
install=("$apt_get" install -y -q --no-install-recommends "${missing[@]}")
if ! "${install[@]}" >/dev/null 2>&1; then
    # A fresh machine's package lists are empty or stale: update them, and show apt-get's reason
    # if the install still fails.
    "$apt_get" update -q >/dev/null && "${install[@]}" >/dev/null \
        || echo "make: apt-get could not install ${missing[*]}; the tests that need them skip (fail under CI=true)" >&2
fi
exit 0
