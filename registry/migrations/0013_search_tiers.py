import django.contrib.postgres.search
from django.db import migrations

from registry.sqlops import run_sql_on

# PostgreSQL only, like the full-text index of 0007: the summary of the vectors already stored (their A and B
# weights), and one GIN index per relevance tier: on the summary, and on its names (weight A) alone
# (selectors._tiers builds the same expression).
PG_FORWARD = [
    "UPDATE registry_environmentsearch SET summary = ts_filter(vector, '{a,b}') WHERE vector IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS environmentsearch_summary ON registry_environmentsearch USING gin (summary)",
    "CREATE INDEX IF NOT EXISTS environmentsearch_names ON registry_environmentsearch "
    "USING gin (ts_filter(summary, '{a}'))",
    "ANALYZE registry_environmentsearch",  # statistics on the new expressions, so the planner can weigh a tier
]
PG_BACKWARD = [
    "DROP INDEX IF EXISTS environmentsearch_names",
    "DROP INDEX IF EXISTS environmentsearch_summary",
]


class Migration(migrations.Migration):

    dependencies = [
        ("registry", "0012_evaluations"),
    ]

    operations = [
        migrations.AddField(
            model_name="environmentsearch",
            name="summary",
            field=django.contrib.postgres.search.SearchVectorField(null=True, help_text=(
                "Names, description, tags and MCP tools only: small enough to check row by row, for the "
                "relevance tiers.")),
        ),
        run_sql_on("postgresql", PG_FORWARD, PG_BACKWARD),
    ]
