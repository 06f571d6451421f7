"""migrate's one-script form: bookkeeping rows after the migrations, and an error's position
mapped back to the migration that holds it."""

from __future__ import annotations

from core.settings import Settings
from projections.migrate import Migration, migration_at, script

SETTINGS = Settings(environment="test")
PENDING = [
    Migration(1, "first", "CREATE TABLE a (x int);"),
    Migration(2, "second", "CREATE TABLE b (v vector({{EMBEDDING_DIMENSIONS}}));\nCREATE TABL c ();"),
    Migration(3, "third", "CREATE TABLE d (x int);"),
]


def test_the_script_is_the_rendered_migrations_in_order_then_one_bookkeeping_insert():
    text = script(PENDING, SETTINGS).as_string(None)
    dims = str(SETTINGS.embedding.dimensions)
    assert text.index("TABLE a") < text.index(f"vector({dims})") < text.index("TABLE d")
    assert text.endswith("INSERT INTO schema_migrations (version, name) VALUES (1, 'first'), (2, 'second'), (3, 'third')")


def test_an_error_position_names_the_migration_that_holds_it():
    text = script(PENDING, SETTINGS).as_string(None)
    position = str(text.index("TABL c") + 1)  # PostgreSQL's positions are 1-based characters
    assert migration_at(PENDING, SETTINGS, position).version == 2
    assert migration_at(PENDING, SETTINGS, str(text.index("TABLE d") + 1)).version == 3
    assert migration_at(PENDING, SETTINGS, "1").version == 1
    assert migration_at(PENDING, SETTINGS, str(text.index("INSERT") + 1)) is None
    assert migration_at(PENDING, SETTINGS, None) is None
