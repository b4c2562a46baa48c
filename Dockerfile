FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config config
COPY runtime runtime
COPY transports transports
COPY worker worker
RUN pip install --no-cache-dir .
ENV KEFU_DATA_DIR=/data
CMD ["celery", "-A", "worker", "worker", "-l", "info"]
