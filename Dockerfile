# One image for every Codemojex role in compose.yaml: `codemojex migrate | web | worker`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Only what the wheels need: echomq (its own distribution, echomq/pyproject.toml) and
# codemojex (codemojex, web and the migrations), which depends on it.
COPY pyproject.toml README.md ./
COPY echomq ./echomq
COPY codemojex ./codemojex
COPY web ./web
COPY migrations ./migrations
RUN pip install ./echomq . && useradd --system --uid 10001 --no-create-home codemojex

USER codemojex
# 8000: `codemojex web` (HTTP, websockets, /metrics); 9100: a worker's /metrics
# (CODEMOJEX_METRICS_PORT, as compose.yaml sets it).
EXPOSE 8000 9100
# compose.yaml gives every service its own `codemojex …` command; this is the fallback.
CMD ["codemojex", "--help"]
