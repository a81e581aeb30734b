"""The one exception tree."""

from __future__ import annotations

import pytest

import tabhyper_update as th
from tabhyper_update.values import errors
from tabhyper_update.values.errors import InvalidActionBatchError, JobTimeoutError, Problem


def test_every_error_derives_from_the_root() -> None:
    for name in [*th.__all__, *errors.__all__]:
        obj = getattr(th, name) if name in th.__all__ else getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, th.TabHyperError), name


def test_job_timeout_is_a_timeout_error_carrying_the_job_id() -> None:
    err = JobTimeoutError("job-1", 12.5)
    assert isinstance(err, TimeoutError)
    assert err.job_id == "job-1"
    assert "wait() on it again" in str(err)


def test_api_error_names_status_code_summary_and_request() -> None:
    err = th.ApiError(
        status=404,
        code="404004",
        summary="Resource Not Found",
        detail="Datasource 'x' not found",
        method="GET",
        url="https://tableau.example/api/3.24/sites/s/datasources/x",
    )
    text = str(err)
    for part in (
        "HTTP 404",
        "404004",
        "Resource Not Found",
        "Datasource 'x' not found",
        "GET https://tableau.example/api/3.24/sites/s/datasources/x",
    ):
        assert part in text


def test_job_failed_carries_notes() -> None:
    err = th.JobFailedError("j", "Specified table does not exist: X (errorCode=410012)")
    assert "410012" in str(err)
    assert err.notes is not None
    assert "no notes" in str(th.JobFailedError("j", None))


def test_invalid_batch_lists_problems() -> None:
    err = InvalidActionBatchError([Problem("$.actions[0]", "a"), Problem("$", "b")])
    assert str(err).splitlines() == ["invalid action batch:", "  - $.actions[0]: a", "  - $: b"]
    assert isinstance(err, ValueError)


def test_a_traceback_names_each_exception_where_the_docs_do() -> None:
    """``tabhyper_update.errors.PayloadError`` in a traceback, as the docs name it (not the
    layer module that defines it), and pickled and read back as that same class."""
    import pickle
    import traceback

    from tabhyper_update import errors

    for name in errors.__all__:
        exported = getattr(errors, name)
        if isinstance(exported, type) and issubclass(exported, errors.TabHyperError):
            assert exported.__module__ == "tabhyper_update.errors", name
    with pytest.raises(errors.PayloadError) as caught:
        raise errors.PayloadError("table 'Extract': a bad row")
    shown = "".join(traceback.format_exception(caught.value)).strip().splitlines()[-1]
    assert shown == "tabhyper_update.errors.PayloadError: table 'Extract': a bad row"
    assert type(pickle.loads(pickle.dumps(caught.value))) is errors.PayloadError
