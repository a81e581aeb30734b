"""A file is uploaded in at most 1,000 blocks (Tableau's limit per upload): the block grows
with the file within the 64 MB request cap, and a file that cannot fit is refused before
anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import Insert, Payload
from tabhyper_update.errors import PayloadError
from tabhyper_update.rest.uploads import MAX_BLOCKS, MB, block_size, even_blocks
from tabhyper_update.testing import FakeTableauServer, make_hyper, read_table, run_sql

from ._util import client_for


def test_a_small_chunk_size_grows_so_a_file_takes_at_most_1000_blocks(tmp_path: Path) -> None:
    rows = make_hyper(tmp_path / "rows.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    run_sql(
        rows,
        'INSERT INTO "Extract"."Extract" SELECT i, md5(CAST(i AS TEXT)) '
        "FROM generate_series(1, 60000) AS g(i)",
    )
    size = rows.stat().st_size
    chunk_kb = 1
    assert size / (chunk_kb * 1024) > MAX_BLOCKS  # as asked, it would take more blocks
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        luid = server.add_datasource("Orders", start)
        with client_for(server, chunk_size_mb=chunk_kb / 1024) as client:
            client.update_datasource(
                "Orders",
                Payload.from_hyper(rows),
                actions=[Insert(source_table="Extract", target_table="Extract")],
                state_dir=tmp_path / "state",
            )
        assert server.counts["append"] <= MAX_BLOCKS
        assert server.counts["append"] == -(-size // -(-size // MAX_BLOCKS))
        server.wait_idle()
        assert len(read_table(server.datasource_path(luid), "Extract")) == 60000


def test_a_file_that_cannot_fit_in_1000_blocks_is_refused_before_anything_is_sent() -> None:
    assert block_size(10 * MB, 50 * MB, "small.hyper") == 50 * MB
    assert block_size(50 * 1000 * MB, 1 * MB, "big.hyper") == 50 * MB
    with pytest.raises(PayloadError, match="more than 1000 blocks"):
        block_size(64 * 1000 * MB, 50 * MB, "huge.hyper")


def _rows_file(path: Path, rows: int) -> tuple[Path, int]:
    made = make_hyper(path, {"Extract": ("id BIGINT, v TEXT", [])})
    run_sql(
        made,
        'INSERT INTO "Extract"."Extract" SELECT i, md5(CAST(i AS TEXT)) '
        f"FROM generate_series(1, {rows}) AS g(i)",
    )
    return made, made.stat().st_size


def _apply(server: FakeTableauServer, tmp_path: Path, rows: Path, **options: Any) -> str:
    luid = server.add_datasource(
        "Orders", make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    )
    with client_for(server, chunk_size_mb=64 / 1024, **options) as client:
        client.update_datasource(
            "Orders",
            Payload.from_hyper(rows),
            actions=[Insert(source_table="Extract", target_table="Extract")],
            state_dir=tmp_path / "state",
        )
    server.wait_idle()
    return luid


def test_blocks_go_at_once_where_the_server_takes_sequence_ids(tmp_path: Path) -> None:
    rows, size = _rows_file(tmp_path / "rows.hyper", 20000)
    block = even_blocks(size, 64 * 1024, 4)
    blocks = -(-size // block)
    assert blocks > 8
    assert blocks % 4 == 0  # no stream idle in the last round
    # A modelled network pace keeps each block in flight long enough to overlap.
    with FakeTableauServer(
        pats={"ci": "pat-secret"}, directory=tmp_path / "srv", upload_seconds_per_mb=0.5
    ) as server:
        luid = _apply(server, tmp_path, rows, upload_streams=4)
        assert server.counts["initiate"] == 1
        assert server.counts["append"] == blocks
        assert server.backend.uploads.most_appends_in_flight == 4
        assert len(read_table(server.datasource_path(luid), "Extract")) == 20000


def test_a_lost_block_answer_sends_that_block_again_alone(tmp_path: Path) -> None:
    rows, size = _rows_file(tmp_path / "rows.hyper", 20000)
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        server.inject("append", nth=4, drop="after")  # received, its answer lost
        luid = _apply(server, tmp_path, rows, upload_streams=3)
        blocks = -(-size // even_blocks(size, 64 * 1024, 3))
        assert server.counts["initiate"] == 1  # no fresh session
        assert server.counts["append"] == blocks + 1  # that one block twice
        assert len(read_table(server.datasource_path(luid), "Extract")) == 20000


def test_a_server_that_refuses_sequence_ids_gets_one_block_after_another_and_is_remembered(
    tmp_path: Path,
) -> None:
    rows, size = _rows_file(tmp_path / "rows.hyper", 20000)
    blocks = -(-size // (64 * 1024))
    with FakeTableauServer(
        pats={"ci": "pat-secret"}, directory=tmp_path / "srv", profile="server-2025.1"
    ) as server:
        luid = _apply(server, tmp_path, rows, upload_streams=4)
        # One block refused with sequenceID, then the file block by block in a new session.
        assert server.counts["initiate"] == 2
        assert server.counts["append"] == blocks + 1
        assert server.backend.uploads.most_appends_in_flight == 1
        assert len(read_table(server.datasource_path(luid), "Extract")) == 20000
        with client_for(server, chunk_size_mb=64 / 1024, upload_streams=4) as client:
            client.upload(rows)  # the server is remembered: nothing refused this time
        assert server.counts["initiate"] == 3
        assert server.counts["append"] == 2 * blocks + 1


def test_a_server_that_stops_taking_sequence_ids_at_the_same_address_is_relearnt(
    tmp_path: Path,
) -> None:
    rows, size = _rows_file(tmp_path / "rows.hyper", 20000)
    server = FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv")
    with server, client_for(server, chunk_size_mb=64 / 1024, upload_streams=4) as client:
        client.upload(rows)  # taken: the server is remembered as taking sequenceID
        assert server.counts["initiate"] == 1
        # The same address now refuses it (a server put back to an older release):
        # every block of the first session goes at once and is refused.
        server.backend.uploads.sequence_ids = False
        session = client.upload(rows)
        assert server.counts["initiate"] == 3  # the refused session, then one block by one
        assert len(server.backend.uploads.consume(session).read_bytes()) == size
        appends = server.counts["append"]
        client.upload(rows)  # relearnt: one session, its blocks one after another
        assert server.counts["initiate"] == 4
        assert server.counts["append"] == appends + -(-size // (64 * 1024))


def test_the_fake_assembles_blocks_by_sequence_and_refuses_a_gap(tmp_path: Path) -> None:
    from tabhyper_update.testing.wire import ApiFailure

    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        backend = server.backend
        session = backend.uploads.initiate()
        backend.uploads.append(session, b"world", 2)
        backend.uploads.append(session, b"hello ", 1)
        backend.uploads.append(session, b"hello ", 1)  # sent again: replaces block 1
        assert backend.uploads.consume(session).read_bytes() == b"hello world"
        gap = backend.uploads.initiate()
        backend.uploads.append(gap, b"a", 1)
        backend.uploads.append(gap, b"c", 3)
        with pytest.raises(ApiFailure) as refused:
            backend.uploads.consume(gap)
        assert "sequenceID 2 never arrived" in refused.value.detail
        mixed = backend.uploads.initiate()
        backend.uploads.append(mixed, b"a")
        with pytest.raises(ApiFailure) as refused:
            backend.uploads.append(mixed, b"b", 2)
        assert "all carry sequenceID or none" in refused.value.detail
        # The other way round: begun in blocks, a plain append is refused too.
        blocks_first = backend.uploads.initiate()
        backend.uploads.append(blocks_first, b"a", 1)
        with pytest.raises(ApiFailure) as refused:
            backend.uploads.append(blocks_first, b"b")
        assert "all carry sequenceID or none" in refused.value.detail
        # Nothing sent yet: the first append chooses the way (here, blocks).
        fresh = backend.uploads.initiate()
        backend.uploads.append(fresh, b"", 1)
        backend.uploads.append(fresh, b"xyz", 2)
        assert backend.uploads.consume(fresh).read_bytes() == b"xyz"


def test_upload_streams_is_checked() -> None:
    from tabhyper_update.errors import InvalidArgumentError

    for bad in (0, 33, 2.5, True):
        with pytest.raises(InvalidArgumentError, match="upload_streams"):
            client_for("http://127.0.0.1:9", upload_streams=bad)
