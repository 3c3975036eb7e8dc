from django.db import migrations

# PostgreSQL only, like the full-text index of 0007: one GIN index per relevance tier, on the stored vector
# restricted to that tier's weights (selectors._weighted builds the same expression), so that the names tier
# and the names-and-summary tier are each read from an index of their own.
PG_FORWARD = [
    "CREATE INDEX IF NOT EXISTS environmentsearch_names ON registry_environmentsearch "
    "USING gin (ts_filter(vector, '{a}'))",
    "CREATE INDEX IF NOT EXISTS environmentsearch_summary ON registry_environmentsearch "
    "USING gin (ts_filter(vector, '{a,b}'))",
    "ANALYZE registry_environmentsearch",  # statistics on the new expressions, so the planner can weigh a tier
]
PG_BACKWARD = [
    "DROP INDEX IF EXISTS environmentsearch_summary",
    "DROP INDEX IF EXISTS environmentsearch_names",
]


def postgres_forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in PG_FORWARD:
            schema_editor.execute(statement)


def postgres_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in PG_BACKWARD:
            schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ("registry", "0012_evaluations"),
    ]

    operations = [
        migrations.RunPython(postgres_forward, postgres_backward),
    ]
