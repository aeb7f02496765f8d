"""Helpers for the tests of the store and the CLI: damaged store files, an independent connection
to a store's database, and the statements a call sends."""
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import NullPool


def corrupt(path: Path, where: str) -> None:
    """Overwrite pages with garbage (what a bad disk or a stray write leaves): every page after
    the first ("all but the header") or the second half of the file, where the metric rows are
    ("the metric pages": the runs table still reads)."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    start = page if where == "all but the header" else len(data) // 2 // page * page
    data[start:] = bytes((i * 37 + 11) % 256 for i in range(len(data) - start))
    path.write_bytes(bytes(data))


@contextmanager
def raw_connection(store):
    """A connection of its own to the store's database (not the store's pool), in a transaction
    committed at the end: what another program reading or changing the tables sees."""
    engine = create_engine(store.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def raw_rows(store, sql: str, **params) -> list[tuple]:
    with raw_connection(store) as conn:
        return [tuple(row) for row in conn.execute(text(sql), params)]


def write_order(store) -> str:
    """The column that orders metric rows by when they were written (store Note [write order])."""
    return "rowid" if store.dialect == "sqlite" else "seq"


def statements_while(store, call) -> list[str]:
    """The SQL statements ``call()`` sends through the store's connections."""
    sent = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    event.listen(store._engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(store._engine, "before_cursor_execute", record)
    return sent
