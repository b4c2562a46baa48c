FROM python:3.11-slim
# kefu runs as an unprivileged user; /data (the delivery store, session logs, memory) is its own.
RUN useradd --create-home --uid 10001 kefu && mkdir /data && chown kefu:kefu /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config config
COPY runtime runtime
COPY transports transports
COPY worker worker
RUN pip install --no-cache-dir .
ENV KEFU_DATA_DIR=/data
USER kefu
VOLUME /data
CMD ["celery", "-A", "worker", "worker", "-l", "info"]
