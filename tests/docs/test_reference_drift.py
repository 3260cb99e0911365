"""The hand-written references match the code, both ways.

* docs/cli.md: one ``## `memstore COMMAND` `` section per click command (nested groups too), one
  table row per option; no section or row for a command or option that does not exist.
* docs/configuration.md: one row per ``Settings`` field (``MEMSTORE_<FIELD>``) with its default;
  every ``MEMSTORE_*`` name the docs mention is a setting.
* docs/errors.md: one row per ``MemstoreError`` subclass anywhere in memstore.
* Signatures: a bold code span shaped like a call (``**`MemoryStore.load_window(app_id, ...)`**``)
  names real parameters, in order, with the real defaults, and every required one; a report of
  ``memstore/reports.py`` written as a call (bold or not) lists exactly its fields.

Generic on purpose: a setting, command, option, error or report added later without a docs entry
fails here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pydantic
import pytest
from click.testing import CliRunner

import memstore
import memstore.reports
from memstore.cli import cli
from memstore.config import ENV_PREFIX, Settings
from memstore.errors import MemstoreError
from tests.docs.markdown import DOCS, ROOT, code_spans, markdown_files, prose, sections, table_rows

# -- CLI -------------------------------------------------------------------------------------


def _commands(
    command: click.Command = cli, path: str = "memstore"
) -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, f"{path} {name}")


def _long_options(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names - {"--help"}


def _cli_sections() -> dict[str, str]:
    found = {}
    for title, body in sections(DOCS / "cli.md").items():
        match = re.fullmatch(r"`(memstore(?: [\w-]+)*)`", title)
        if match:
            found[match[1]] = body
    return found


def test_every_cli_command_has_a_section_and_no_section_is_made_up() -> None:
    documented = set(_cli_sections())
    actual = {path for path, _ in _commands()}
    assert actual - documented == set(), "commands without a section in docs/cli.md"
    assert documented - actual == set(), "sections in docs/cli.md for commands that do not exist"


@pytest.mark.parametrize("path, command", list(_commands()), ids=lambda v: str(v))
def test_every_cli_option_is_documented_and_exists(path: str, command: click.Command) -> None:
    body = _cli_sections().get(path)
    assert body is not None, f"no section for `{path}` in docs/cli.md"
    rows = {
        match[1] for row in table_rows(body) if (match := re.fullmatch(r"`(--[\w-]+)`", row[0]))
    }
    assert _long_options(command) - rows == set(), f"`{path}`: options without a row"
    assert rows - _long_options(command) == set(), f"`{path}`: rows for options it lacks"
    shown = CliRunner().invoke(cli, [*path.split()[1:], "--help"])
    assert shown.exit_code == 0, shown.output
    assert {option for option in rows if option not in shown.output} == set()


# -- settings ---------------------------------------------------------------------------------


def _render_default(value: Any) -> str:
    if value is None or value == ():  # () : no encryption keys
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def test_every_setting_is_documented_with_its_default() -> None:
    rows = {
        match[1]: row[1]
        for row in table_rows((DOCS / "configuration.md").read_text())
        if (match := re.fullmatch(r"`(MEMSTORE_\w+)`", row[0]))
    }
    expected = {
        ENV_PREFIX + name.upper(): _render_default(field.get_default(call_default_factory=True))
        for name, field in Settings.model_fields.items()
    }
    assert set(expected) - set(rows) == set(), "settings without a row in docs/configuration.md"
    assert set(rows) - set(expected) == set(), "rows for settings that do not exist"
    assert rows == expected, "documented defaults differ from memstore/config.py"


def test_every_memstore_variable_the_docs_mention_exists() -> None:
    settings = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    for path in markdown_files():
        mentioned = set(re.findall(r"\bMEMSTORE_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
        unknown = {name for name in mentioned - settings if not name.startswith("MEMSTORE_TEST_")}
        assert not unknown, f"{path.relative_to(ROOT)} mentions unknown settings {unknown}"


# -- errors -----------------------------------------------------------------------------------


def _import_all_of_memstore() -> None:
    for module in pkgutil.walk_packages(memstore.__path__, "memstore."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # an adapter whose framework is not installed
            continue


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_error_is_in_the_error_table_and_the_table_names_real_errors() -> None:
    _import_all_of_memstore()
    actual = {
        cls.__name__
        for cls in (MemstoreError, *_subclasses(MemstoreError))
        if cls.__module__.startswith("memstore")
    }
    rows = {
        match[1]
        for row in table_rows((DOCS / "errors.md").read_text())
        if (match := re.match(r"`(\w+)`", row[0]))
    }
    assert actual - rows == set(), "errors without a row in docs/errors.md"
    assert rows - actual == set(), "rows in docs/errors.md for errors that do not exist"


# -- signatures and report fields -------------------------------------------------------------

_CALL = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\((?P<params>.*)\)")
NAMESPACES = (
    "memstore",
    "memstore.aio",
    "memstore.guard",
    "memstore.formats",
    "memstore.adapters.langchain",
    "memstore.adapters.langgraph",
    "memstore.adapters.openai_agents",
    "memstore.adapters.pydantic_ai",
    "memstore.adapters.google_adk",
    "memstore.adapters.claude_agent_sdk",
    "memstore.adapters.agent_framework",
)
"""Where the first part of a documented name is looked up, in order."""

REPORTS = {
    name: cls
    for name, cls in vars(memstore.reports).items()
    if isinstance(cls, type)
    and issubclass(cls, pydantic.BaseModel)
    and cls.__module__ == memstore.reports.__name__
    and not name.startswith("_")
}


@dataclass(frozen=True)
class Param:
    name: str
    required: bool
    default: Any
    keyword_only: bool


def _resolve(dotted: str) -> Any:
    first, *rest = dotted.split(".")
    for namespace in NAMESPACES:
        try:
            target: Any = getattr(importlib.import_module(namespace), first)
        except (ImportError, AttributeError):
            continue
        for part in rest:
            target = getattr(target, part)
        return target
    raise LookupError(dotted)


def _actual(target: Any) -> list[Param]:
    if isinstance(target, type) and issubclass(target, pydantic.BaseModel):
        return [
            Param(name, field.is_required(), field.get_default(call_default_factory=True), True)
            for name, field in target.model_fields.items()
        ]
    params = list(inspect.signature(target).parameters.values())
    if params and params[0].name in ("self", "cls") and not inspect.ismethod(target):
        params = params[1:]
    return [
        Param(
            p.name,
            p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD),
            p.default,
            p.kind is p.KEYWORD_ONLY,
        )
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _documented(params: str) -> list[Param]:
    """The parameters of a documented ``name(a, b=1, *, c=None)``, defaults as literals."""
    tree = ast.parse(f"def _({params}): pass").body[0]
    assert isinstance(tree, ast.FunctionDef)
    args = tree.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    found = [
        Param(a.arg, d is None, ast.literal_eval(d) if d is not None else None, False)
        for a, d in zip(positional, defaults, strict=True)
    ]
    found += [
        Param(a.arg, d is None, ast.literal_eval(d) if d is not None else None, True)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    return found


@dataclass(frozen=True)
class Signature:
    where: str
    name: str
    params: str
    bold: bool


def _signatures(path: Path) -> Iterator[Signature]:
    for code, bold in code_spans(prose(path)):
        match = _CALL.fullmatch(code.strip())
        if match is None:
            continue
        if bold or match["name"] in REPORTS:
            yield Signature(str(path.relative_to(ROOT)), match["name"], match["params"], bold)


def _all_signatures() -> list[Signature]:
    return [s for path in markdown_files() for s in _signatures(path)]


def check_signature(signature: Signature) -> list[str]:
    """What is wrong with one documented signature ([] when it matches the code)."""
    label = f"{signature.where}: {signature.name}({signature.params})"
    try:
        target = _resolve(signature.name)
    except (LookupError, AttributeError):
        return [f"{label}: no such name in memstore"]
    try:
        documented = _documented(signature.params)
    except (SyntaxError, ValueError) as error:
        return [f"{label}: not a parseable parameter list ({error})"]
    actual = {p.name: p for p in _actual(target)}
    order = list(actual)
    problems = []
    names = [p.name for p in documented]
    if signature.name.split(".")[-1] in REPORTS and names != order:
        problems.append(f"{label}: a report lists every field in order: {order}")
    for param in documented:
        real = actual.get(param.name)
        if real is None:
            problems.append(f"{label}: no parameter {param.name!r}")
            continue
        if not param.required and real.default != param.default:
            problems.append(f"{label}: {param.name} defaults to {real.default!r}")
        if param.keyword_only and not real.keyword_only:
            problems.append(f"{label}: {param.name} is not keyword-only")
    known = [n for n in names if n in actual]
    if known != sorted(known, key=order.index):
        problems.append(f"{label}: parameters out of order, the code has {order}")
    missing = [p.name for p in actual.values() if p.required and p.name not in names]
    if missing:
        problems.append(f"{label}: required parameters left out: {missing}")
    return problems


def test_documented_signatures_and_report_fields_match_the_code() -> None:
    signatures = _all_signatures()
    assert signatures, "no documented signature found: the parser is broken"
    problems = [problem for s in signatures for problem in check_signature(s)]
    assert problems == []


def test_every_report_is_documented_with_its_fields() -> None:
    documented = {s.name.split(".")[-1] for s in _all_signatures()}
    assert set(REPORTS) - documented == set(), "reports without a field list in the docs"


def test_the_purge_report_drift_is_caught(tmp_path: Path) -> None:
    """The README line that left out ``tool_executions`` (issue 9, item 12) fails the check."""
    stale = Signature(
        "README.md", "PurgeReport", "app_id, original_rows, display_rows, cache_keys", False
    )
    assert any("every field" in problem for problem in check_signature(stale))
    wrong_default = Signature(
        "x.md", "MemoryStore.history", "app_id, limit=50, before_id=None", True
    )
    assert any("defaults to 20" in problem for problem in check_signature(wrong_default))
    made_up = Signature("x.md", "MemoryStore.load_window", "app_id, size=50", True)
    assert any("no parameter 'size'" in problem for problem in check_signature(made_up))
