"""A file is uploaded in at most 1,000 blocks (Tableau's limit per upload): the block grows
with the file within the 64 MB request cap, and a file that cannot fit is refused before
anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tabhyper_update import Insert, Payload
from tabhyper_update.errors import PayloadError
from tabhyper_update.rest.uploads import MAX_BLOCKS, MB, block_size
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
