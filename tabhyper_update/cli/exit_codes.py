"""The exit codes of ``tabhyper-update``: each declared once, with its meaning; the table in
``--help``, the command's docstring and the docs are derived from :data:`MEANINGS`."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_NOT_FOUND = 4
EXIT_JOB = 5
EXIT_DRIFT = 6
EXIT_UNCHECKED = 7
EXIT_AUTH = 8
EXIT_INTERRUPTED = 130

#: Each exit code and what it means (in the order ``--help`` shows them).
MEANINGS: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "invalid input (an action batch, a payload, a change set, an update record)",
    EXIT_USAGE: "usage or configuration error (options, TABLEAU_* variables, files named)",
    EXIT_SERVER: "server or network error (worth a retry)",
    EXIT_NOT_FOUND: "not found (data source, connection, job)",
    EXIT_JOB: "the job failed, was cancelled, ended with an unknown outcome or did not "
    "finish in time",
    EXIT_DRIFT: "verify found drift: the data source differs from its source",
    EXIT_UNCHECKED: "verify stopped before it was done (its --budget of queries, or the "
    "site's VizQL Data Service quota, was spent) and found no drift in what it read",
    EXIT_AUTH: "sign-in refused: the credentials, their site or their rights (not worth a "
    "retry until they change)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C or SIGTERM), after removing what the command had "
    "created; running the same command again resumes",
}


def table(indent: str = "  ", width: int = 88) -> str:
    """The codes as lines ``<code>  <meaning>``, wrapped to ``width``."""
    import textwrap

    lines = []
    for code, meaning in MEANINGS.items():
        head = f"{indent}{code:<3} "
        lines += textwrap.wrap(
            meaning, width, initial_indent=head, subsequent_indent=" " * len(head)
        )
    return "\n".join(lines)


EXIT_CODES = (
    "exit codes:\n"
    + table()
    + "\n\nWith --json, a failure prints one JSON object on stdout:\n"
    + '  {"error": {"class": ..., "message": ..., "exit_code": ...}}'
)
