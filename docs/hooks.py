"""MkDocs hooks: the reference's tables drawn from the code, so that the docs cannot drift from
it. A page holds a marker (``<!-- exit-codes -->``, ``<!-- exceptions -->``,
``<!-- commands -->``) where the table goes."""

from __future__ import annotations

from typing import Any


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def exit_codes() -> str:
    from tabhyper_update.cli.exit_codes import MEANINGS

    rows = [f"| `{code}` | {_cell(meaning)} |" for code, meaning in MEANINGS.items()]
    return "\n".join(["| exit code | meaning |", "|---|---|", *rows])


def exceptions() -> str:
    """Every exception of ``tabhyper_update.errors``, its parent, the exit code the command line
    gives it, and the first sentence of its docstring."""
    import tabhyper_update.errors as errors
    from tabhyper_update.cli import exit_code_for

    rows = ["| exception | is a | exit code | what it means |", "|---|---|---|---|"]
    for name in sorted(errors.__all__):
        cls = getattr(errors, name)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            continue
        parent = cls.__mro__[1].__name__
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        code = exit_code_for(cls.__new__(cls))
        rows.append(f"| `{name}` | `{parent}` | `{code}` | {_cell(doc)} |")
    return "\n".join(rows)


def commands() -> str:
    from tabhyper_update.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    rows = ["| command | what it does |", "|---|---|"]
    for choice in sub._choices_actions:
        rows.append(f"| `tabhyper-update {choice.dest}` | {_cell(choice.help or '')} |")
    return "\n".join(rows)


MARKERS = {
    "<!-- exit-codes -->": exit_codes,
    "<!-- exceptions -->": exceptions,
    "<!-- commands -->": commands,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, draw in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, draw())
    return markdown
