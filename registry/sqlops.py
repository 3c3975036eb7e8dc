"""Migration operations in plain SQL for one database engine (a stable helper the migrations import)."""

from __future__ import annotations

from django.db import migrations


def run_sql_on(vendor: str, forward: list[str], backward: list[str]) -> migrations.RunPython:
    """Run `forward` (and `backward` when unapplied) only where the database is `vendor`: what the model state
    does not hold because the other engines cannot have it (expression, GIN or NULLS LAST indexes)."""
    def run(statements: list[str]):
        def operation(apps, schema_editor) -> None:
            if schema_editor.connection.vendor == vendor:
                for statement in statements:
                    schema_editor.execute(statement)
        return operation

    return migrations.RunPython(run(forward), run(backward))
