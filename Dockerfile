# One image for the web app and the import workers (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml ./
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh
COPY . .
ENV HOST=0.0.0.0 PORT=8000 DATA_DIR=/data
EXPOSE 8000
CMD ["bash", "scripts/start.sh"]
