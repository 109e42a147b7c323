"""The names a claim uses, checked when the configuration is read, by every command that reads it.

A claim names a table, the column it measures, arms that filter the table's rows (by column, by
an experiment's `variant` or `role`) and checks that do the same. A misspelled name used to
select nothing: the claim came out "not judged" after the whole grid had trained. Here every
such name is checked against what exists, before anything runs, with a did-you-mean:

- a table must be one claims read: each is declared, with its columns, where it is made: a run table
  in a module-level `RUN_TABLES = {table: {experiment, keys, measures, ...}}` of a module of
  `mathrl/analysis/measures/` (its columns: the keys, then the measures), a bandit table in a
  `BANDIT_TABLES = {table: {study, measures, spread, among}}` there (`bandit_columns`), `run_measures` and the few
  tables a study makes itself in a `CLAIM_TABLES = {table: [columns]}` (of a module of `measures/` or a
  study module under `mathrl/analysis/studies/`; `{grid}` stands for the experiments' grid keys,
  `{measures}` for the measures of every run). Those modules import pandas, matplotlib and torch;
  the declarations are read from their source instead (`module_constant`), so a configuration
  is checked without importing any of them, and `mathrl aggregate` holds every table it makes to
  its declaration (`conform`): what the check believes is what the tables hold;
- a measure, an arm's filter column and a check's measure must be columns of their table;
- in a user's claim (an experiment's `claims:`), a variant must be one of the experiment's
  variants and a role one of its roles. A document's claim names a study's roles, which a
  configuration may leave out: it is then "not judged", saying which role is missing, as designed
  (tests/test_strict_config.py checks config/claims.yaml's roles against config/config.yaml).

The claims' declarations are read and validated by `mathrl.pipeline.config` (`claim_declarations`), expanded
here (`expand`), torch- and pandas-free, and judged by `mathrl.analysis.claims`.
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
import itertools
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from mathrl.pipeline.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[1]  # mathrl/, whose wings hold the modules
MEASURE_MODULES = tuple(sorted((PACKAGE / "analysis" / "measures").glob("*.py")))  # registered measures, run tables
# the modules that declare the tables claims read (RUN_TABLES, CLAIM_TABLES)
TABLE_MODULES = (*MEASURE_MODULES, *sorted((PACKAGE / "analysis" / "studies").glob("*.py")))
GRID, MEASURES = "{grid}", "{measures}"  # run_measures' columns that depend on the config and on the registry
NOT_COLUMNS = ("measure", "table", "experiment", "role")  # keys of an arm that are not column filters
SAFE_BUILTINS = {"list": list, "tuple": tuple, "dict": dict, "sorted": sorted, "str": str, "len": len}


# ----------------------------------------------------------------------------- declarations of tables
@functools.cache
def _module(path: Path) -> tuple[dict[str, ast.expr], dict[str, tuple[str, str]]]:
    """A source file's module-level assignments (name -> expression) and `from mathrl... import` names."""
    assigned, imported = {}, {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigned[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mathrl"):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    return assigned, imported


def module_path(module: str) -> Path:
    """The source file of a mathrl module (`mathrl.analysis.kit` -> mathrl/analysis/kit.py)."""
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


@functools.cache
def _constant(path: Path, name: str):
    assigned, imported = _module(path)
    if name in imported:
        module, attr = imported[name]
        return _constant(module_path(module), attr)
    if name not in assigned:
        raise NameError(f"{path}: {name} is no module-level constant")
    expr = assigned[name]
    used = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    scope = {n: _constant(path, n) for n in used if n in assigned or n in imported}
    try:  # our own source: a constant expression over the module's other constants
        return eval(compile(ast.Expression(expr), str(path), "eval"), {"__builtins__": SAFE_BUILTINS, **scope})  # noqa: S307
    except Exception as exc:
        raise NameError(f"{path}: {name} is not a constant this reader can evaluate ({exc})") from None


def module_constant(path: Path, name: str):
    """The value of `name = <expression>` at the top level of a mathrl source file, from the source alone (the module
    is not imported): the expression may use literals, comprehensions, `str` methods and the file's other module-level
    constants, or names it imports `from mathrl...`, each read the same way."""
    return copy.deepcopy(_constant(Path(path), name))


def bandit_columns(decl: dict) -> list[str]:
    """The columns of a bandit table (a BANDIT_TABLES declaration): the seed's setting and seed, its measures, `n`
    (the seeds found), the spread across seeds of each measure in `spread` (`{m}_std`, in the pooled rows), then the
    measures of each row among the table's rows (`among`)."""
    return ["setting", "seed", *decl["measures"], "n", *(f"{m}_std" for m in decl["spread"]), *decl["among"]]


@functools.cache
def declared_tables() -> dict[str, tuple[str, ...]]:
    """Every RUN_TABLES, BANDIT_TABLES and CLAIM_TABLES declaration of TABLE_MODULES: {table: its columns, `{grid}`
    and `{measures}` unresolved}."""
    out: dict[str, tuple[str, ...]] = {}
    for path in TABLE_MODULES:
        found = {}
        if "RUN_TABLES" in _module(path)[0]:
            found |= {t: [*d["keys"], *d["measures"]] for t, d in module_constant(path, "RUN_TABLES").items()}
        if "BANDIT_TABLES" in _module(path)[0]:
            found |= {t: bandit_columns(d) for t, d in module_constant(path, "BANDIT_TABLES").items()}
        if "CLAIM_TABLES" in _module(path)[0]:
            found |= module_constant(path, "CLAIM_TABLES")
        for table, columns in found.items():
            if table in out:
                raise ValueError(f"{path}: table {table} is declared a second time")
            out[table] = tuple(columns)
    return out


@functools.cache
def measure_names(every_run: bool = True) -> tuple[str, ...]:
    """The names of the measures registered in mathrl/analysis/measures/ (`@measure("name", ...)`, `@among`,
    `@seed_measure`; with `every_run`, those of run_measures alone), in the order registered."""
    names = []
    for path in MEASURE_MODULES:
        for node in ast.parse(path.read_text()).body:
            for deco in node.decorator_list if isinstance(node, ast.FunctionDef) else ():
                if not (
                    isinstance(deco, ast.Call) and getattr(deco.func, "id", "") in ("measure", "among", "seed_measure")
                ):
                    continue
                if not (deco.args and isinstance(deco.args[0], ast.Constant)):
                    continue
                flag = next((k.value for k in deco.keywords if k.arg == "every_run"), None)
                if not every_run or (isinstance(flag, ast.Constant) and flag.value is True):
                    names.append(deco.args[0].value)
    return tuple(names)


def grid_keys(cfg: dict) -> list[str]:
    """Every grid key of the configuration's experiments, in the order first met."""
    keys = [k for exp in (cfg.get("experiments") or {}).values() for k in (exp.get("grid") or {})]
    return list(dict.fromkeys(keys))


def table_columns(cfg: dict) -> dict[str, list[str]]:
    """{table claims read: its columns} for this configuration."""
    expanded = {GRID: grid_keys(cfg), MEASURES: list(measure_names())}
    return {
        table: list(dict.fromkeys(c for column in columns for c in expanded.get(column, [column])))
        for table, columns in declared_tables().items()
    }


def conform(name: str, df, cfg: dict):
    """A table as made, held to its declaration: a column it was not declared with is an error (a claim naming it
    would be refused when the config is read); a declared column it lacks is added, empty (a study without its runs
    makes a frame without columns)."""
    declared = table_columns(cfg).get(name)
    if declared is None:
        return df
    extra = [c for c in df.columns if c not in declared]
    if extra:
        kinds = "RUN_TABLES, BANDIT_TABLES or CLAIM_TABLES"
        raise ValueError(f"table {name}: columns {extra} are not in its declaration ({kinds}) {declared}")
    missing = [c for c in declared if c not in df.columns]
    return df.reindex(columns=[*df.columns, *missing]) if missing else df


# ----------------------------------------------------------------------------- declarations of claims
def fill(obj, subs: Mapping[str, str]):
    """`{name}` placeholders of a foreach replaced in every string of a declaration."""
    if isinstance(obj, str):
        return re.sub(r"\{(\w+)\}", lambda m: str(subs[m.group(1)]) if m.group(1) in subs else m.group(0), obj)
    if isinstance(obj, list):
        return [fill(x, subs) for x in obj]
    if isinstance(obj, dict):
        return {k: fill(v, subs) for k, v in obj.items()}
    return obj


def expand(decl: dict, cfg: dict | None = None, star: Callable[[str, str], list] | None = None) -> list[dict]:
    """A declaration with `foreach: {name: [values] | "*" | {experiments_with_role: R}}` as one declaration per
    combination; "*" takes `star(table, name)`, the column's values in the claim's table (without it, the placeholder
    `{name}` stays: a listing before any table exists)."""
    loops = decl.get("foreach")
    if not loops:
        return [decl]
    body = {k: v for k, v in decl.items() if k != "foreach"}
    names, choices = [], []
    for name, values in loops.items():
        if values == "*":
            values = [f"{{{name}}}"] if star is None else star(fill(body.get("table", "run_measures"), {}), name)
        elif isinstance(values, dict) and "experiments_with_role" in values:
            role = values["experiments_with_role"]
            values = [e for e, x in ((cfg or {}).get("experiments") or {}).items() if role in (x.get("roles") or {})]
        names.append(name)
        choices.append([str(v) for v in values])
    return [fill(body, dict(zip(names, combo))) for combo in itertools.product(*choices)]


# ----------------------------------------------------------------------------- the check
def check(cfg: dict, declarations: list[tuple[dict, str]]) -> None:
    """Every name each claim uses (`declarations`: (declaration, where it was written), each valid against the schema:
    `config.claim_declarations`) against the tables, columns, variants and roles there are; ConfigError naming the
    claim and the key."""
    tables = table_columns(cfg)
    for decl, where in declarations:
        for d in expand(decl, cfg):
            check_names(d, where, tables, cfg)


def check_names(d: dict, where: str, tables: dict[str, list[str]], cfg: dict) -> None:
    """The names of one expanded declaration (placeholders of a foreach over a table's values are left alone)."""
    table = d.get("table", "run_measures")
    if _open(table):
        return
    if table not in tables:
        raise ConfigError(
            f"{where}: table: {table!r} is not a table claims read{_close(table, tables)}; "
            f"allowed: {', '.join(sorted(tables))}"
        )
    experiment = d.get("experiment")
    _column(d["measure"], table, tables, f"{where}: measure")
    # a user's claim is their experiment's: its variants and roles are checked; a document's names a study's roles,
    # which a configuration may leave out (the claim is then not judged, and says so)
    optional = set(d.get("optional") or ()) if d.get("kind", "user") == "user" else None
    for arm in ("a", "b"):
        if isinstance(d.get(arm), dict):
            _arm(d[arm], table, tables, f"{where}: {arm}", cfg, experiment, optional)
    for i, c in enumerate(d.get("checks") or ()):
        at, own = f"{where}: checks[{i}]", c.get("table", table)
        if _open(own):
            continue
        if own not in tables:
            raise ConfigError(
                f"{at}.table: {own!r} is not a table claims read{_close(own, tables)}; "
                f"allowed: {', '.join(sorted(tables))}"
            )
        _column(c["measure"], own, tables, f"{at}.measure")
        for key in ("arm", "ratio_to", "minus_to"):
            if isinstance(c.get(key), dict):
                _arm(c[key], own, tables, f"{at}.{key}", cfg, experiment, optional)


def _arm(
    arm: dict, table: str, tables: dict, where: str, cfg: dict, experiment: str | None, optional: set | None
) -> None:
    """An arm's filters: columns of its table; and, for a user's claim (`optional`: the roles it may do without; None
    for a document's), a variant of its experiment and a role the experiment declares."""
    own = arm.get("table", table)
    if _open(own) or own not in tables:
        return
    if "measure" in arm:
        _column(arm["measure"], own, tables, f"{where}.measure")
    experiment = arm.get("experiment", experiment)  # an arm may read another experiment's rows
    exp = (cfg.get("experiments") or {}).get(experiment) if experiment else None
    for key in arm:
        if key in NOT_COLUMNS or (key == "variant" and "setting" in tables[own]):  # a study names a variant its setting
            continue
        _column(key, own, tables, f"{where}.{key}")
    if optional is None:
        return
    # (a table without an experiment column may hold another experiment's variants)
    variants = list((exp or {}).get("variants") or {}) if "experiment" in tables[own] else []
    value = arm.get("variant")
    if variants and value is not None and not _open(value) and str(value) not in variants:
        raise ConfigError(
            f"{where}.variant: {value!r} is not a variant of experiment {experiment}"
            f"{_close(str(value), variants)}; allowed: {', '.join(variants)}"
        )
    role, roles = arm.get("role"), (exp or {}).get("roles") or {}
    if exp is None or role is None or _open(role) or role in optional or role in roles or "role" in tables[own]:
        return  # (a table with a role column of its own may be filtered by it)
    raise ConfigError(
        f"{where}.role: {role!r} is not a role of experiment {experiment}{_close(role, roles)}; "
        f"allowed: {', '.join(roles) or 'none (the experiment declares no roles:)'}"
    )


def _column(name, table: str, tables: dict, where: str) -> None:
    if _open(name) or name in tables[table]:
        return
    if table == "run_measures":
        also = "; `mathrl claims --measures` lists the measures"
    else:
        also = f"; its columns: {', '.join(tables[table])}"
    raise ConfigError(f"{where}: {name!r} is not a column of table {table}{_close(str(name), tables[table])}{also}")


def _open(name) -> bool:
    """A name a foreach over a table's values fills in only when the tables exist."""
    return isinstance(name, str) and "{" in name


def _close(name: str, allowed) -> str:
    close = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
