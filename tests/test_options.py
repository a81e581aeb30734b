"""Options that travel together are one object, and a keyword no call takes is refused by
name (a typo is never silently ignored), before anything is built or sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import Insert, Payload, Republish, TableauSink, build_payload
from tabhyper_update.builder.options import BuildSettings
from tabhyper_update.errors import ArgumentTypeError, InvalidArgumentError
from tabhyper_update.testing import FakeTableauServer, make_hyper
from tabhyper_update.types import BuildOptions

from ._util import PAT, client_for


def test_a_misspelt_build_option_is_refused_before_spark(tmp_path: Path) -> None:
    options: Any = {"max_paylod_mb": 5}
    with pytest.raises(ArgumentTypeError, match="'max_paylod_mb'; did you mean 'max_payload_mb'"):
        build_payload(object(), output_dir=tmp_path, **options)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_misspelt_update_option_is_refused_before_any_request(tmp_path: Path) -> None:
    hyper = make_hyper(tmp_path / "p.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "srv") as server:
        server.add_datasource(
            "Orders", make_hyper(tmp_path / "t.hyper", {"Extract": ("id BIGINT", [])})
        )
        with client_for(server) as client:
            bound = Payload.from_hyper(hyper).upload(
                "Orders", client=client, state_dir=tmp_path / "s"
            )
            before = sum(server.counts.values())
            typo: Any = {"verfy": True}
            with pytest.raises(ArgumentTypeError, match="'verfy'; did you mean 'verify'"):
                bound.apply(**typo)
            typo = {"stat_dir": "x"}
            with pytest.raises(ArgumentTypeError, match="'stat_dir'; did you mean 'state_dir'"):
                client.update_datasource("Orders", Payload.from_hyper(hyper), **typo)
            assert sum(server.counts.values()) == before


def test_bootstrap_checks_the_updates_options_before_building_or_sending(
    tmp_path: Path,
) -> None:
    """A schema policy bootstrap's update could not follow is refused before the snapshot
    is built or a request sent (it used to surface only after a publish or a build)."""
    built: list[str] = []

    def never() -> Payload:
        built.append("built")
        raise AssertionError("nothing should be built")

    with (
        FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "srv") as server,
        client_for(server) as client,
    ):
        before = sum(server.counts.values())
        bad: Any = {"on_schema_change": "drop"}
        with pytest.raises(InvalidArgumentError, match="on_schema_change must be"):
            client.bootstrap("Orders", snapshot=never, changes=never, **bad)
        typo: Any = {"stat_dir": "x"}
        with pytest.raises(ArgumentTypeError, match="did you mean 'state_dir'"):
            client.bootstrap("Orders", snapshot=never, changes=never, **typo)
        assert sum(server.counts.values()) == before
    assert built == []


def test_build_options_are_taken_whole_and_checked(tmp_path: Path) -> None:
    insert = [Insert(source_table="Extract", target_table="Extract")]
    options = BuildOptions(max_payload_mb=5, staging="driver")
    with (
        FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "srv") as server,
        client_for(server) as client,
    ):
        sink = TableauSink("Orders", actions=insert, build=options, check=False, client=client)
        # Made once, checked, as the build's own object (no bars: the sink shows none).
        assert sink.build == BuildSettings(max_payload_mb=5, staging="driver", progress=False)
        assert sink.update.target_table is None
        assert sink.update.on_schema_change == "fail"
        with pytest.raises(InvalidArgumentError, match="does not take 'keep_files'"):
            TableauSink(
                "Orders",
                actions=insert,
                build=BuildOptions(keep_files=True),
                check=False,
                client=client,
            )
    bad: Any = {"stagin": "driver"}
    with pytest.raises(ArgumentTypeError, match="did you mean 'staging'"):
        Republish(lambda: None, build=bad)  # type: ignore[arg-type, return-value]


def test_each_settings_object_holds_exactly_its_declared_keywords() -> None:
    """The frozen objects and the keyword declarations they are made from cannot drift
    apart: a keyword with no field (or a field with no keyword) would fail here."""
    from dataclasses import fields

    from tabhyper_update.builder.options import BuildOptions, BuildSettings
    from tabhyper_update.testing.settings import BackendConfig, BackendSettings
    from tabhyper_update.update.options import (
        ApplyOptions,
        ApplySettings,
        BindOptions,
        BindSettings,
        BootstrapOptions,
        BootstrapSettings,
        ProbeOptions,
        ProbeSettings,
        PublishOptions,
        PublishSettings,
        UpdateOptions,
    )

    def keys(declared: Any) -> set[str]:
        return set(declared.__optional_keys__ | declared.__required_keys__)

    def names(settings: Any) -> set[str]:
        return {f.name for f in fields(settings)}

    assert names(ApplySettings) == keys(ApplyOptions)
    assert names(BuildSettings) == keys(BuildOptions)
    assert names(PublishSettings) == keys(PublishOptions)
    assert names(ProbeSettings) == keys(ProbeOptions)
    assert names(BindSettings) == keys(BindOptions)
    # Bootstrap's own, and the update's (bound and applied) passed on whole.
    assert names(BootstrapSettings) - {"bind", "apply"} == keys(BootstrapOptions) - keys(
        UpdateOptions
    )
    assert names(BackendConfig) == keys(BackendSettings)
