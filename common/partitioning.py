"""Hash partitioning by wallet: the tables it applies to and the SQL that converts one.

``SHERDLOCK_PARTITIONS`` (``common.knobs``) is read by the migrations that key the token, lock
and selection tables by wallet (tokens 0005, locks 0012): with more than one partition they
turn each table into ``PARTITION BY HASH (wallet)`` with that many partitions, named
``<table>_p0`` ... ``<table>_p<N-1>``. A wallet's tokens, locks and selections then share a
partition number (same key, same modulus), as they would share a Citus shard group.

The number is fixed when the migrations run. To change it on a database: migrate back to
before them (``manage.py migrate locks 0011`` then ``tokens 0004``), then forward again with the
new ``SHERDLOCK_PARTITIONS``; rows are copied both ways. Composed with ``str.format`` only.
"""

from __future__ import annotations

# The partitioned tables, each with the column its sequence feeds (or "" when none), in the
# order the migrations convert them.
TABLES = (
    ("tokens_token", "id"),
    ("locks_tokenlock", ""),
    ("locks_selection", "id"),
)


def partition_names(table: str, partitions: int) -> list[str]:
    """Return the partitions' table names (``[table]`` when unpartitioned)."""
    if partitions <= 1:
        return [table]
    return [f"{table}_p{i}" for i in range(partitions)]


# Turn {schema}.{table} (keys already naming the wallet) into a table partitioned by hash of
# wallet with {partitions} partitions, keeping its name, rows, defaults, constraints, indexes
# (with their names), triggers, storage parameters (set on every partition: a partitioned table
# has none of its own) and the sequence of its {id} column (an identity column becomes a plain
# column fed by an owned sequence: PostgreSQL before 17 has no identity on partitioned tables).
# Every definition is read from the catalog before the table is dropped and replayed on the
# new one, whose name it then carries.
PARTITION = """
DO $partition$
DECLARE
    source regclass := '{schema}.{table}'::regclass;
    replay text[];
    options text[];
    old_sequence text;
    last bigint;
    called boolean;
    statement text;
BEGIN
    SELECT coalesce(array_agg(format('ALTER TABLE {schema}.{table} ADD CONSTRAINT %I %s',
                                     conname, pg_get_constraintdef(oid))
                              ORDER BY contype = 'p' DESC, conname), ARRAY[]::text[])
    INTO replay
    FROM pg_constraint WHERE conrelid = source AND contype IN ('p', 'u', 'c');
    SELECT replay || coalesce(array_agg(pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid),
                              ARRAY[]::text[])
    INTO replay
    FROM pg_index i
    WHERE i.indrelid = source
      AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid);
    SELECT replay || coalesce(array_agg(pg_get_triggerdef(oid) ORDER BY tgname), ARRAY[]::text[])
    INTO replay
    FROM pg_trigger WHERE tgrelid = source AND NOT tgisinternal;
    SELECT reloptions INTO options FROM pg_class WHERE oid = source;

    CREATE TABLE {schema}.{table}_partitioned
        (LIKE {schema}.{table} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS)
        PARTITION BY HASH (wallet);
    FOR i IN 0 .. {partitions} - 1 LOOP
        EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {schema}.{table}_partitioned '
                       'FOR VALUES WITH (MODULUS {partitions}, REMAINDER %s)',
                       '{table}_p' || i, i);
        IF options IS NOT NULL THEN
            EXECUTE format('ALTER TABLE {schema}.%I SET (%s)', '{table}_p' || i,
                           array_to_string(options, ', '));
        END IF;
    END LOOP;

{sequence}
    INSERT INTO {schema}.{table}_partitioned SELECT * FROM {schema}.{table};
    DROP TABLE {schema}.{table};
    ALTER TABLE {schema}.{table}_partitioned RENAME TO {table};{sequence_renamed}
    FOREACH statement IN ARRAY replay LOOP
        EXECUTE statement;
    END LOOP;
END
$partition$
"""

# The way back: an unpartitioned table of the same name, rows, constraints, indexes, triggers
# and storage parameters (read from its first partition), its {id} column an identity again.
UNPARTITION = """
DO $unpartition$
DECLARE
    source regclass := '{schema}.{table}'::regclass;
    replay text[];
    options text[];
    last bigint;
    statement text;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = source) <> 'p' THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(format('ALTER TABLE {schema}.{table} ADD CONSTRAINT %I %s',
                                     conname, pg_get_constraintdef(oid))
                              ORDER BY contype = 'p' DESC, conname), ARRAY[]::text[])
    INTO replay
    FROM pg_constraint WHERE conrelid = source AND contype IN ('p', 'u', 'c');
    SELECT replay || coalesce(array_agg(pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid),
                              ARRAY[]::text[])
    INTO replay
    FROM pg_index i
    WHERE i.indrelid = source
      AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid);
    SELECT replay || coalesce(array_agg(pg_get_triggerdef(oid) ORDER BY tgname), ARRAY[]::text[])
    INTO replay
    FROM pg_trigger WHERE tgrelid = source AND NOT tgisinternal AND tgparentid = 0;
    SELECT reloptions INTO options FROM pg_class
    WHERE oid = '{schema}.{table}_p0'::regclass;

    CREATE TABLE {schema}.{table}_unpartitioned
        (LIKE {schema}.{table} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS);
    IF options IS NOT NULL THEN
        EXECUTE format('ALTER TABLE {schema}.{table}_unpartitioned SET (%s)',
                       array_to_string(options, ', '));
    END IF;
    INSERT INTO {schema}.{table}_unpartitioned SELECT * FROM {schema}.{table};{sequence_read}
    DROP TABLE {schema}.{table};
    ALTER TABLE {schema}.{table}_unpartitioned RENAME TO {table};{identity}
    FOREACH statement IN ARRAY replay LOOP
        EXECUTE statement;
    END LOOP;
END
$unpartition$
"""


# PARTITION's and UNPARTITION's steps for a table with a sequence-fed {id} column.
SEQUENCE = """
    old_sequence := pg_get_serial_sequence('{schema}.{table}', '{id}');
    EXECUTE format('SELECT last_value, is_called FROM %s', old_sequence) INTO last, called;
    CREATE SEQUENCE {schema}.{table}_{id}_seq_partitioned AS bigint;
    PERFORM setval('{schema}.{table}_{id}_seq_partitioned', last, called);
    ALTER TABLE {schema}.{table}_partitioned
        ALTER COLUMN {id} SET DEFAULT nextval('{schema}.{table}_{id}_seq_partitioned');
    ALTER SEQUENCE {schema}.{table}_{id}_seq_partitioned
        OWNED BY {schema}.{table}_partitioned.{id};
"""
SEQUENCE_RENAMED = """
    ALTER SEQUENCE {schema}.{table}_{id}_seq_partitioned RENAME TO {table}_{id}_seq;"""
SEQUENCE_READ = """
    EXECUTE 'SELECT last_value FROM ' || pg_get_serial_sequence('{schema}.{table}', '{id}')
    INTO last;
    ALTER TABLE {schema}.{table}_unpartitioned ALTER COLUMN {id} DROP DEFAULT;"""
IDENTITY = """
    ALTER TABLE {schema}.{table} ALTER COLUMN {id} ADD GENERATED BY DEFAULT AS IDENTITY;
    PERFORM setval(pg_get_serial_sequence('{schema}.{table}', '{id}'), last);"""


def partition(table: str, id_column: str, partitions: int, schema: str = "public") -> str:
    """Return the statement that partitions ``schema.table`` by hash of wallet."""
    names = {"schema": schema, "table": table, "id": id_column}
    return PARTITION.format(
        **names,
        partitions=partitions,
        sequence=SEQUENCE.format(**names) if id_column else "",
        sequence_renamed=SEQUENCE_RENAMED.format(**names) if id_column else "",
    )


def unpartition(table: str, id_column: str, schema: str = "public") -> str:
    """Return the statement that turns a partitioned ``schema.table`` back into one table."""
    names = {"schema": schema, "table": table, "id": id_column}
    return UNPARTITION.format(
        **names,
        sequence_read=SEQUENCE_READ.format(**names) if id_column else "",
        identity=IDENTITY.format(**names) if id_column else "",
    )
