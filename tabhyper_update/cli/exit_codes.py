"""The exit codes of ``tabhyper-update``, and their table for ``--help``."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_NOT_FOUND = 4
EXIT_JOB = 5
EXIT_DRIFT = 6
EXIT_UNCHECKED = 7

EXIT_CODES = f"""exit codes:
  {EXIT_OK}  success
  {EXIT_FAILED}  invalid input (an action batch, a payload, a change set, an update record)
  {EXIT_USAGE}  usage or configuration error (options, TABLEAU_* variables, files named)
  {EXIT_SERVER}  server or network error
  {EXIT_NOT_FOUND}  not found (data source, connection, job)
  {EXIT_JOB}  the job failed, was cancelled, ended with an unknown outcome or did not
      finish in time
  {EXIT_DRIFT}  verify found drift: the data source differs from its source
  {EXIT_UNCHECKED}  verify stopped before it was done (its --budget of queries, or the
      site's VizQL Data Service quota, was spent) and found no drift in what it read

With --json, a failure prints one JSON object on stdout:
  {{"error": {{"class": ..., "message": ..., "exit_code": ...}}}}"""
