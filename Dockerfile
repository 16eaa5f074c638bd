# minibroker's image: built once (`docker compose build`), nothing is installed at start.
#   target "broker": the broker and the minibroker command (with the compression codecs);
#   target "spark":  the same plus Java and PySpark, to run examples/streaming_pipeline.py.
FROM python:3.11-slim AS broker
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol/ protocol/
COPY broker/ broker/
COPY client/ client/
COPY spark_connector/ spark_connector/
COPY pyspark_minibroker/ pyspark_minibroker/
RUN pip install ".[compression]" \
    && useradd --system --uid 10001 --home-dir /data minibroker \
    && mkdir -p /data /etc/minibroker && chown minibroker /data
COPY docker/server.properties /etc/minibroker/server.properties
USER minibroker
VOLUME /data
EXPOSE 9092 29092 9308
# Exec form: the broker is the process that receives SIGTERM (docker compose stop), and shuts
# down cleanly (flush, snapshots, clean-shutdown marker) well inside the grace period.
ENTRYPOINT ["minibroker", "serve"]
CMD ["--config", "/etc/minibroker/server.properties"]

FROM broker AS spark
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && pip install ".[spark,compression]"
COPY examples/ examples/
USER minibroker
ENTRYPOINT []
CMD ["python", "examples/streaming_pipeline.py", "--bootstrap", "broker:29092", "--demo", "10000", "--available-now", "--checkpoint", "/data/checkpoints"]
