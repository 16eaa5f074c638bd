#!/usr/bin/env bash
# Fetch Apache Kafka 4.4.0's jars (the broker, the tools, the client, a log4j2 binding: see pom.xml)
# from Maven Central into Maven's local repository, once, and write their classpath to OUTFILE.
#
#   tests/kafka_ref/fetch.sh OUTFILE
#
# Maven's local repository is ~/.m2/repository unless MAVEN_OPTS names another with
# -Dmaven.repo.local=DIR (.ci/run does, to keep the downloads across CI runs). A second run
# downloads nothing. The jars are never copied into the project.
set -euo pipefail
out=${1:?usage: fetch.sh OUTFILE}
here=$(cd "$(dirname "$0")" && pwd)
mvn -B -q -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$out"
