# The pulsegraph service image (used by docker-compose.yml for the service and the demo producer).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ingest ingest
COPY snapshots snapshots
COPY compute compute
COPY api api
COPY pulsegraph pulsegraph
RUN pip install --no-cache-dir . && useradd --create-home pulsegraph && mkdir /data && chown pulsegraph /data
USER pulsegraph
EXPOSE 8000
CMD ["pulsegraph", "run", "--host", "0.0.0.0", "--data-dir", "/data"]
