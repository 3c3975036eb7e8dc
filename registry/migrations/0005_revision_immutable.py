"""Revisions are immutable: what was read at a sha stays as it was read. The database refuses an UPDATE."""

from django.db import migrations

MESSAGE = "registry_revision rows are immutable: index a new revision instead"

# (forward statements, backward statements), one statement each.
SQL = {
    "postgresql": (
        [
            f"""CREATE FUNCTION registry_revision_immutable() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'integrity_constraint_violation'; END;
            $$ LANGUAGE plpgsql""",
            """CREATE TRIGGER registry_revision_no_update BEFORE UPDATE ON registry_revision
            FOR EACH ROW EXECUTE FUNCTION registry_revision_immutable()""",
        ],
        [
            "DROP TRIGGER IF EXISTS registry_revision_no_update ON registry_revision",
            "DROP FUNCTION IF EXISTS registry_revision_immutable()",
        ],
    ),
    "sqlite": (
        [f"""CREATE TRIGGER registry_revision_no_update BEFORE UPDATE ON registry_revision
            BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"""],
        ["DROP TRIGGER IF EXISTS registry_revision_no_update"],
    ),
}


def _run(schema_editor, index: int) -> None:
    statements = SQL.get(schema_editor.connection.vendor)
    if statements is None:
        return  # another engine: immutability rests on the services alone
    for statement in statements[index]:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("registry", "0004_validationrun_sent_at")]

    operations = [
        migrations.RunPython(
            lambda apps, schema_editor: _run(schema_editor, 0),
            lambda apps, schema_editor: _run(schema_editor, 1),
        ),
    ]
