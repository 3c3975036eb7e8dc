# The hub's image: web (gunicorn), worker and beat all run from it (see docker-compose.yml).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HUB_VAR_DIR=/var/lib/openenv-hub
WORKDIR /app

COPY pyproject.toml constraints.txt README.md ./
RUN pip install --no-cache-dir -c constraints.txt .

COPY . .
RUN useradd --system --uid 10001 --home-dir /var/lib/openenv-hub --create-home hub \
    && SECRET_KEY=build-only python manage.py collectstatic --noinput \
    && chown -R hub /var/lib/openenv-hub
USER hub

EXPOSE 8000
CMD ["gunicorn", "hub.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
