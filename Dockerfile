# minibroker's image: built once (`docker compose build`), nothing is installed at start.
#   target "broker": the broker and the minibroker command (with the compression codecs);
#   target "spark":  the same plus Java and PySpark, to run examples/streaming_pipeline.py.
# The base image is pinned (PYTHON_IMAGE) and so is every Python package (docker/requirements.txt).
# The sources are only in the build stage: the images hold the installed packages, in a venv.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protocol/ protocol/
COPY broker/ broker/
COPY client/ client/
COPY spark_connector/ spark_connector/
COPY pyspark_minibroker/ pyspark_minibroker/
COPY docker/requirements.txt docker/requirements.txt
RUN python -m venv /opt/minibroker \
    && /opt/minibroker/bin/pip install -c docker/requirements.txt ".[compression]" \
    && find /opt/minibroker -name __pycache__ -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS broker
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/minibroker/bin:$PATH
# uid 10001 owns /data: a bind mount in its place must be writable by it (docs/operations.md).
RUN useradd --system --uid 10001 --home-dir /data minibroker \
    && mkdir -p /data /etc/minibroker && chown minibroker /data
COPY --from=build /opt/minibroker /opt/minibroker
COPY docker/server.properties /etc/minibroker/server.properties
COPY docker/healthcheck.py /usr/local/bin/minibroker-healthcheck
USER minibroker
WORKDIR /data
VOLUME /data
EXPOSE 9092 29092 9308
# Exec form: the broker is the process that receives SIGTERM (docker compose stop), and shuts
# down cleanly (flush, snapshots, clean-shutdown marker) well inside the grace period.
ENTRYPOINT ["minibroker", "serve"]
CMD ["--config", "/etc/minibroker/server.properties"]

FROM broker AS spark
USER root
COPY docker/requirements.txt /tmp/requirements.txt
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && PIP_NO_CACHE_DIR=1 /opt/minibroker/bin/pip install -c /tmp/requirements.txt pyspark pyarrow \
    && rm /tmp/requirements.txt
COPY examples/ /app/examples/
WORKDIR /app
USER minibroker
ENTRYPOINT []
CMD ["python", "examples/streaming_pipeline.py", "--bootstrap", "broker:29092", "--demo", "10000", "--available-now", "--checkpoint", "/data/checkpoints"]
