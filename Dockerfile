# One image for every kefu service (compose.yaml builds it once, as kefu:<version>). The base is
# pinned to an exact release; the dependencies to requirements.lock.
FROM python:3.11.14-slim
# kefu runs as an unprivileged user; /data (the delivery store, session logs, memory) is its own.
RUN useradd --create-home --uid 10001 kefu && mkdir /data && chown kefu:kefu /data
WORKDIR /app
# Every package pip installs for kefu is held to its locked version (how to regenerate the lock: its header).
ENV PIP_CONSTRAINT=/app/requirements.lock
COPY requirements.lock ./
# The locked dependencies first: a layer rebuilt only when the lock changes, not with each code change.
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY config config
COPY runtime runtime
COPY transports transports
COPY worker worker
RUN pip install --no-cache-dir .
# The simulation scripts the README runs (`kefu simulate examples/simulation/…`).
COPY examples examples
ENV KEFU_DATA_DIR=/data
USER kefu
VOLUME /data
CMD ["celery", "-A", "worker", "worker", "-l", "info"]
