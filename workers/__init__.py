"""Celery tasks: fetch by primary key or natural key, call one service, decide retry."""
