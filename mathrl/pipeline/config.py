"""Configuration: one schema, read by the CLI and by Snakemake alike.

`config/config.schema.yaml` holds every key's type, range, default and description.
Loading a config means: read the YAML files (safe loader) and merge them in order, apply
`key=value` overrides, validate against the schema, fill the defaults, then check what a
schema cannot (a run's task exists, the batch splits into groups). Experiments expand into
runs: variants x grid x seeds, each with a readable run id and fully resolved settings.

Every problem raises `ConfigError`, whose message names the key, the value and what is
allowed; the CLI turns it into exit status 2 before anything is written.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mathrl.pipeline.errors import ConfigError  # re-exported: callers import it from here
from mathrl.pipeline.layout import warmup_of
from mathrl.pipeline.settings import RunSettings

ROOT = Path(__file__).resolve().parents[2]  # the repository: mathrl/pipeline/ is two levels down
SCHEMA_PATH = ROOT / "config" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
CLAIMS_PATH = ROOT / "config" / "claims.yaml"  # layout.CLAIMS_FILE: the documents', papers' and testbed's claims
RUN_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# A number with an exponent and no dot (1e-3) or an unsigned exponent (1.0e3): a float in
# YAML 1.2, text in YAML 1.1 (PyYAML), and a float on the command line; a float everywhere here.
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping: PyYAML keeps the second and drops the first in silence (a second
    `experiments:` block would drop every experiment of the first)."""

    def __init__(self, key, first: int, second: int):
        super().__init__(key, first, second)
        self.key, self.first, self.second = key, first, second

    def __str__(self) -> str:
        where = f"line {self.first}" if self.first == self.second else f"lines {self.first} and {self.second}"
        return f"key {self.key!r} is given twice in one mapping ({where})"


class YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader where PyYAML was built with it (10x faster; the same safe subset),
    reading every float form of YAML 1.2 as a float (PyYAML reads YAML 1.1, where `1e-3` is text),
    and refusing a key given twice in one mapping (DuplicateKeyError)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            lines: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges on purpose
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                try:
                    if key in lines:
                        raise DuplicateKeyError(key, lines[key], line)
                    lines[key] = line
                except TypeError:  # an unhashable key: the constructor below names it
                    pass
        return super().construct_mapping(node, deep=deep)


YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789."))
YAML_LOADER = YamlLoader


def safe_load(text: str):
    """yaml.safe_load, through libyaml when available."""
    return yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader


def read_yaml(path: str | Path) -> dict:
    """Read one YAML mapping with the safe loader; errors name the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path}: no such file")
    try:
        data = safe_load(path.read_text())
    except DuplicateKeyError as exc:
        raise ConfigError(f"config file {path}: {exc}; YAML would keep the second in silence: give it once") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"config file {path}{line}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of keys, got {type(data).__name__}")
    return data


@functools.cache
def _schema_text_parsed() -> dict:
    return safe_load(SCHEMA_PATH.read_text())


def load_schema() -> dict:
    """The schema (parsed once per process; a copy, so callers may not corrupt it)."""
    return copy.deepcopy(_schema_text_parsed())


def deep_merge(base: dict, update: dict) -> dict:
    """Recursively merge `update` into a copy of `base` (mappings merge, the rest replaces)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_value(text: str) -> Any:
    """A command-line value: int, float (including `1e-3`, which YAML 1.1 reads as text),
    or any YAML scalar or list (`true`, `null`, `[64, 512]`); a mapping that gives a key twice
    raises DuplicateKeyError."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() == "none":
        return None
    try:
        return safe_load(text)
    except DuplicateKeyError:
        raise
    except yaml.YAMLError:
        return text


def yaml12_numbers(obj: Any) -> Any:
    """`obj` with every text that YAML 1.2 reads as a float (`1e-3`) made a float: for a
    config another YAML 1.1 reader loaded (Snakemake's --configfile)."""
    if isinstance(obj, dict):
        return {key: yaml12_numbers(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [yaml12_numbers(value) for value in obj]
    if isinstance(obj, str) and EXPONENT_FLOAT.match(obj):
        return float(obj.replace("_", ""))
    return obj


def check_finite(obj: Any, where: str = "", origin=None, path: tuple = ()) -> None:
    """Refuse inf and nan anywhere in a config (`lr=inf`, `.nan`): no setting means them, and
    they would pass every range check of the schema."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            check_finite(value, where, origin, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            check_finite(value, where, origin, (*path, i))
    elif isinstance(obj, float) and not math.isfinite(obj):
        key = ".".join(str(p) for p in ([where] if where else []) + list(path))
        came_from = origin(list(path)) if origin else None
        where_from = f" (from {came_from})" if came_from else ""
        raise ConfigError(f"{key}: {obj!r} is not a finite number; use a finite value{where_from}")


def parse_overrides(items: list[str] | tuple[str, ...]) -> list[tuple[list[str], Any]]:
    """`a.b=value` strings into (key path, value) pairs. An item that would drop an earlier one in silence is
    refused: the same key again, or a mapping that replaces the one an earlier item set a key in (`train.lr=1e-3`,
    then `train={steps: 3}`)."""
    out, given = [], {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value")
        try:
            path = tuple(key.split("."))
            out.append((list(path), parse_value(value)))
        except DuplicateKeyError as exc:
            raise ConfigError(f"override {item!r}: {exc}; give it once") from None
        for earlier, earlier_item in given.items():
            if earlier[: len(path)] == path:  # the same key, or a key inside the mapping this item replaces
                how = "both set it" if earlier == path else f"the second replaces {key}, and with it the first"
                raise ConfigError(f"overrides {earlier_item!r} and {item!r}: {how}; give each key once")
        given[path] = item
    return out


def apply_overrides(cfg: dict, overrides: list[tuple[list[str], Any]]) -> dict:
    cfg = copy.deepcopy(cfg)
    for path, value in overrides:
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {'.'.join(path)}: {key} is not a mapping")
        node[path[-1]] = value
    return cfg


def _suggest(name: str, allowed, descriptions: dict | None = None) -> str:
    """A did-you-mean: the closest spelling, else the key whose description names what the
    unknown key's words say (`learning_rate` -> `lr`, described as "Peak learning rate.")."""
    close = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=1)
    if not close and descriptions:
        phrase = " ".join(str(name).lower().replace("-", "_").split("_"))
        close = sorted((k for k, text in descriptions.items() if phrase in str(text).lower()), key=len)[:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(error: jsonschema.ValidationError, prefix: str, origin=None, root: dict | None = None) -> str:
    """One line per schema error: the dotted key, the value, what is allowed (and, given
    `origin`, which file or --set gave the value; given the `root` schema validated against,
    where a misplaced key belongs)."""
    line = _describe_only(error, prefix, root)
    came_from = origin(list(error.absolute_path)) if origin else None
    return f"{line} (from {came_from})" if came_from else line


def _belongs(key: str, error: jsonschema.ValidationError, root: dict | None) -> str | None:
    """Where a key unknown at the error's place belongs, where it is a key one level down (`direction` at a claim's
    top level belongs under `expect`) or one level up (`measure` under `expect` belongs beside it)."""
    if root is None:
        return None
    met, node = [], root
    for part in error.absolute_schema_path:  # the schemas walked from the root to the error's, $refs followed
        node = _follow(root, node)
        met.append(node)
        node = node[part] if isinstance(node, dict) and part in node else None
        if node is None:
            return None
    objects = [m for m in met if isinstance(m, dict) and "properties" in m]
    below = [
        name
        for name, sub in (objects[-1]["properties"] if objects else {}).items()
        if key in (_follow(root, sub).get("properties") or {})
    ]
    if below:
        return f"it belongs under {below[0]} ({below[0]}: {{{key}: ...}})"
    if len(objects) > 1 and key in objects[-2]["properties"] and isinstance(error.absolute_path[-1], str):
        return f"it belongs one level up, beside {error.absolute_path[-1]} (not under it)"
    return None


def _follow(root: dict, node):
    """`node` with its `$ref` (`#/definitions/NAME`) followed."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        target = root
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node if isinstance(node, dict) else {}


def _describe_only(error: jsonschema.ValidationError, prefix: str, root: dict | None = None) -> str:
    path = ".".join(
        [prefix] + [str(p) for p in error.absolute_path] if prefix else [str(p) for p in error.absolute_path]
    )
    where = path or "(top level)"
    if error.validator == "additionalProperties":
        properties = error.schema.get("properties", {})
        allowed = sorted(properties)
        described = {k: v.get("description", "") for k, v in properties.items() if isinstance(v, dict)}
        extra = sorted(set(error.instance) - set(allowed))
        parts = []
        for k in extra:
            belongs = _belongs(k, error, root)
            hint = f"; {belongs}" if belongs else _suggest(k, allowed, described)
            parts.append(f"{where}.{k}: unknown key{hint}" if path else f"{k}: unknown key{hint}")
        if properties.keys() == _schema_text_parsed()["definitions"]["train"]["properties"].keys():
            return "; ".join(parts) + f"; `mathrl settings` lists the {len(allowed)} run settings"
        return "; ".join(parts) + f"; allowed keys: {', '.join(allowed)}"
    if error.validator == "enum":
        return (
            f"{where}: {error.instance!r} is not allowed{_suggest(error.instance, error.validator_value)}; allowed:"
            f" {', '.join(map(str, error.validator_value))}"
        )
    if error.validator == "propertyNames" and "enum" in error.validator_value:
        allowed = error.validator_value["enum"]
        return (
            f"{where}: key {error.instance!r} is not allowed{_suggest(error.instance, allowed)}; allowed:"
            f" {', '.join(allowed)}"
        )
    return f"{where}: {error.message}"


def _defaults(definition: dict) -> dict:
    return {k: copy.deepcopy(v["default"]) for k, v in definition.get("properties", {}).items() if "default" in v}


def fill_defaults(cfg: dict, schema: dict) -> dict:
    """Fill defaults for the top level, each task, each sft block and `train`.

    Experiments are deliberately left alone: their settings are overrides, and a default
    filled into them would mask the algorithm presets and the `train` block."""
    cfg = copy.deepcopy(cfg)
    defs = schema["definitions"]
    for key, value in _defaults(schema).items():
        cfg.setdefault(key, value)
    cfg["tasks"] = {name: {**_defaults(defs["task"]), **task} for name, task in cfg["tasks"].items()}
    # Every task gets a warm-up block, the defaults when the config names none.
    cfg["sft"] = {name: {**_defaults(defs["sft"]), **cfg["sft"].get(name, {})} for name in cfg["tasks"]}
    cfg["train"] = {**_defaults(defs["train"]), **cfg["train"]}
    cfg["gradvar"] = {**_defaults(defs["gradvar"]), **cfg.get("gradvar", {})}
    return cfg


def load_config(paths=(DEFAULT_CONFIG,), overrides=()) -> dict:
    """Read, merge, override, validate and complete a configuration.

    `paths` are merged in order (a later file overrides an earlier one, as Snakemake does
    with several --configfile); a file that says `standalone: true` drops the ones before
    it. `overrides` are `a.b=value` strings."""
    cfg, layers = read_layers(paths, overrides)
    return complete(cfg, source=", ".join(name for name, _ in layers), origin=lambda key: origin_of(layers, key))


def read_layers(paths, overrides=()) -> tuple[dict, list[tuple[str, dict]]]:
    """The merged, overridden config before validation, and its layers (for error messages)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    cfg: dict = {}
    layers: list[tuple[str, dict]] = []
    for path in paths:
        layer = read_yaml(path)
        if layer.get("standalone"):
            cfg, layers = {}, []
        cfg = deep_merge(cfg, layer)
        layers.append((str(path), layer))
    pairs = parse_overrides(list(overrides))
    cfg = apply_overrides(cfg, pairs)
    layers += [(f"--set {item}", apply_overrides({}, [pair])) for item, pair in zip(overrides, pairs)]
    return cfg, layers


def load_config_and_runs(paths=(DEFAULT_CONFIG,), overrides=()) -> tuple[dict, dict[str, RunSpec]]:
    """`load_config` and `expand_runs` of its result, remembered across processes (`completed`)."""
    raw, layers = read_layers(paths, overrides)
    return completed(raw, source=", ".join(name for name, _ in layers), origin=lambda k: origin_of(layers, k))


def completed(raw: dict, source: str = "", origin=None) -> tuple[dict, dict[str, RunSpec]]:
    """`complete` of a merged config dict and its runs (`expand_runs`), remembered across processes.

    A training job of the pipeline validated the whole configuration and expanded every run
    of it (about 0.4 s of CPU for the default's two hundred runs) to train one, and every
    Snakemake call did the same before it planned a job. The result is kept as JSON under
    `cache_dir()`, keyed by a hash of the merged configuration and of the code that checks it
    (every mathrl source file's name, size and mtime, and the schema): an edit to either is
    another key. Only a configuration that passed every check is kept, and only if JSON gives
    it back unchanged; a cache that cannot be read or written is passed by."""
    key = hashlib.sha256(json.dumps([raw, _code_stamp()], sort_keys=True, default=repr).encode()).hexdigest()[:24]
    where = cache_dir()
    path = where / f"config-{key}.json" if where is not None else None
    if path is not None:
        try:
            entry = json.loads(path.read_text())
            if entry["key"] == key:
                return entry["cfg"], {s["run_id"]: RunSpec.from_json(s) for s in entry["runs"]}
        except (OSError, ValueError, KeyError, TypeError):
            pass
    cfg, runs = _complete_and_expand(raw, source, origin)
    entry = {"key": key, "cfg": cfg, "runs": [dataclasses.asdict(s) for s in runs.values()]}
    if path is not None and json.loads(json.dumps(entry)) == entry:  # tuples or non-string keys would come back changed
        try:
            from mathrl.pipeline.atomic import atomic_write

            atomic_write(path, json.dumps(entry))
            for old in sorted(where.glob("config-*.json"), key=lambda f: f.stat().st_mtime)[:-CACHE_KEEP]:
                old.unlink(missing_ok=True)
        except OSError:
            pass
    return cfg, runs


CACHE_KEEP = 32  # configurations kept in the cache, the most recently written


def cache_dir() -> Path | None:
    """$MATHRL_CACHE_DIR, else a private directory per user under /tmp; None if it cannot be
    made private to this user, or when MATHRL_CACHE_DIR is `off`."""
    setting = os.environ.get("MATHRL_CACHE_DIR", "").strip()
    if setting == "off":
        return None
    base = Path(setting or f"/tmp/mathrl-cache-{os.getuid()}")
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return base


def _code_stamp() -> list[str]:
    """Name, size and mtime of every mathrl source file, of the schema and of the claims file (checked with the
    config)."""
    package = Path(__file__).resolve().parents[1]  # the whole package, every wing
    stamp = []
    for path in sorted([*package.rglob("*.py"), SCHEMA_PATH, CLAIMS_PATH]):
        st = path.stat()
        stamp.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return stamp


def origin_of(layers: list[tuple[str, dict]], key: list) -> str | None:
    """The last layer (file or --set) that gives a value at `key` (a path of keys)."""
    for name, layer in reversed(layers):
        node = layer
        for part in key:
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return name
    return None


def layered(paths) -> list[Path]:
    """The config files `mathrl --config` reads: config/config.yaml, then the given ones."""
    paths = [Path(p) for p in paths or []]
    if paths and paths[0].resolve() == DEFAULT_CONFIG.resolve():
        return paths
    return [DEFAULT_CONFIG, *paths]


def complete(cfg: dict, source: str = "", origin=None) -> dict:
    """Validate a merged config dict and fill its defaults.
    `origin(key path)` names where a value came from, for the error messages."""
    return _complete_and_expand(cfg, source, origin)[0]


def _complete_and_expand(cfg: dict, source: str = "", origin=None) -> tuple[dict, dict[str, RunSpec]]:
    """`complete`, and the runs every experiment expands into (each must be valid)."""
    schema = load_schema()
    check_finite(cfg, origin=origin)
    validate(cfg, schema, source=source, origin=origin)
    cfg = fill_defaults(cfg, schema)
    for task, block in cfg["sft"].items():
        lo, hi = block["band"]
        if lo > hi:
            raise ConfigError(
                f"sft.{task}.band: {block['band']} is reversed; the lower end comes first, e.g. [{hi}, {lo}]"
            )
    check_train(cfg, cfg["train"], "train")
    for name in cfg["gradvar"]["tasks"]:
        if name not in cfg["tasks"]:
            raise ConfigError(
                f"gradvar.tasks: {name!r} is not a task{_suggest(name, cfg['tasks'])}; allowed:"
                f" {', '.join(cfg['tasks'])}"
            )
    runs = expand_runs(cfg, origin=origin)  # every experiment must expand into valid runs
    from mathrl.analysis import claim_names  # (torch- and pandas-free)

    claim_names.check(cfg, claim_declarations(cfg))  # every name a claim uses: its table, columns, variants and roles
    return cfg, runs


def claim_declarations(cfg: dict, path: Path | None = None) -> list[tuple[dict, str]]:
    """(declaration, where it was written) for the claims file (config/claims.yaml) and every experiment's `claims:`
    block, each valid against the schema's `claim` definition (the file's read once per process and version)."""
    path = Path(path) if path else CLAIMS_PATH
    out = copy.deepcopy(_claims_file(path, path.stat().st_mtime_ns if path.exists() else None))
    for exp, spec in (cfg.get("experiments") or {}).items():
        for i, d in enumerate(spec.get("claims") or []):
            where = f"experiments.{exp}.claims[{i}] ({d.get('id', '?')})"
            validate_claim(d, where)
            own = {"kind": "user", "experiment": exp, "section": "generic", "part": exp, "source": f"experiment {exp}"}
            out.append(({**own, **d}, where))
    return out


@functools.cache
def _claims_file(path: Path, mtime: int | None) -> list[tuple[dict, str]]:
    if mtime is None:
        return []
    claims = read_yaml(path).get("claims") or []
    out = [(d, f"{path.name}: claims[{i}] ({d.get('id', '?')})") for i, d in enumerate(claims)]
    for d, where in out:
        validate_claim(d, where)
    return out


def validate_claim(decl: dict, where: str) -> None:
    """A claim's declaration against the schema's `claim` definition; the error names the claim and the key (and where
    a misplaced key belongs)."""
    validate(decl, prefix=where, validator=_claim_validator())


@functools.cache
def _claim_validator() -> jsonschema.protocols.Validator:
    schema = _schema_text_parsed()
    claim = {**schema["definitions"]["claim"], "definitions": schema["definitions"]}
    return jsonschema.validators.validator_for(claim)(claim)


@functools.cache
def _train_validator() -> jsonschema.protocols.Validator:
    """The validator of one run's settings, built once: a grid checks a hundred runs."""
    schema = _schema_text_parsed()
    train = {**schema["definitions"]["train"], "definitions": schema["definitions"]}
    return jsonschema.validators.validator_for(train)(train)


def validate(
    instance: dict,
    schema: dict | None = None,
    prefix: str = "",
    source: str = "",
    validator: jsonschema.protocols.Validator | None = None,
    origin=None,
) -> None:
    """Validate against the schema (or a prebuilt validator); raise one ConfigError listing every problem."""
    validator = validator or jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [_describe(e, prefix, origin, validator.schema) for e in errors]
        head = f"invalid configuration{f' ({source})' if source else ''}:"
        raise ConfigError(head + "\n  " + "\n  ".join(lines))


# Algorithms whose advantage compares the rollouts of one prompt (group_size >= 2): the
# estimators registered with grouped=True in mathrl.engine.algorithms (named here so that validation
# imports no torch; tests/test_algorithms.py keeps the two equal).
GROUP_ALGORITHMS = ("grpo", "dapo", "dr_grpo", "rloo", "grpo_batch_std", "reinforce_pp_baseline")

# Settings (as canonical JSON) that passed the schema: a process that expands the grid
# twice (load, then `--run`) validates each run once.
_VALID_SETTINGS: set[str] = set()


def check_train(cfg: dict, settings: dict, where: str, world_size: int = 1) -> None:
    """The schema check of one run's settings, then what a schema cannot express."""
    key = json.dumps(settings, sort_keys=True, default=repr)
    if key not in _VALID_SETTINGS:
        check_finite(settings, where)
        validate(settings, prefix=where, validator=_train_validator())
        _VALID_SETTINGS.add(key)
    if settings["task"] not in cfg["tasks"]:
        raise ConfigError(
            f"{where}.task: {settings['task']!r} is not a task{_suggest(settings['task'], cfg['tasks'])}; "
            f"allowed: {', '.join(cfg['tasks'])}"
        )
    sft, warmup = (cfg.get("sft") or {}).get(settings["task"]) or {}, settings.get("warmup")
    if warmup is not None and warmup >= sft.get("warmups", 1):
        raise ConfigError(
            f"{where}.warmup: {warmup} is not a warm-up of task {settings['task']} (sft.{settings['task']}.warmups is "
            f"{sft.get('warmups', 1)}); allowed: 0..{sft.get('warmups', 1) - 1} or null"
        )
    unit = settings["group_size"] * world_size
    if settings["batch_size"] % unit:
        raise ConfigError(
            f"{where}.batch_size: {settings['batch_size']} is not a multiple of group_size x world size "
            f"= {settings['group_size']} x {world_size} = {unit}"
        )
    per_rank = settings["batch_size"] // world_size
    micro = settings["micro_batch_size"]
    if micro and per_rank % micro:
        raise ConfigError(
            f"{where}.micro_batch_size: {micro} does not divide the per-rank batch {per_rank} "
            f"(batch_size {settings['batch_size']} / world size {world_size})"
        )
    if settings["algorithm"] in GROUP_ALGORITHMS and settings["group_size"] < 2:
        raise ConfigError(
            f"{where}.group_size: {settings['algorithm']} needs at least 2 rollouts per prompt (its advantage compares "
            f"the rollouts of one prompt: with {settings['group_size']} every advantage and the loss are 0); "
            "use group_size >= 2, or algorithm reinforce or ppo"
        )
    if settings["lr_schedule"] == "cosine" and settings["warmup_steps"] >= settings["steps"]:
        raise ConfigError(
            f"{where}.warmup_steps: {settings['warmup_steps']} leaves no step for the cosine schedule "
            f"(steps {settings['steps']}); use warmup_steps < steps"
        )
    start, ndigit = settings["curriculum_start"], cfg["tasks"][settings["task"]].get("ndigit")
    if start is not None and ndigit is not None and start > ndigit:
        raise ConfigError(
            f"{where}.curriculum_start: {start} digits is above task {settings['task']}'s {ndigit}, "
            f"so there is no curriculum; use 1..{ndigit} or null"
        )


@dataclass
class RunSpec:
    """One training run of an experiment."""

    run_id: str
    experiment: str
    variant: str | None
    point: dict  # the grid values of this run
    seed: int
    settings: RunSettings = field(repr=False)  # fully resolved train settings, typed when the runs are expanded
    same_as: str | None = None  # an earlier run of identical settings, whose results this one reads
    explicit: dict = field(default_factory=dict, repr=False)  # what the experiment sets: fixed, variant, point, seed

    @property
    def trained_as(self) -> str:
        """The run id whose directory holds this run's results."""
        return self.same_as or self.run_id

    @classmethod
    def from_json(cls, fields: dict) -> RunSpec:
        """Back from `dataclasses.asdict` of one (its settings a dict there)."""
        return cls(**{**fields, "settings": RunSettings.from_dict(fields["settings"])})


def _fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def run_settings(cfg: dict, explicit: dict) -> dict:
    """Train defaults, then the chosen algorithm's preset, then the explicit settings; `lr`
    is then multiplied by `lr_scale` (so the settings hold the LR the run trains with), and `warmup`
    resolved to the seed's warm-up (so the settings name the checkpoint the run starts from)."""
    settings = _layered(cfg, explicit)
    scale, lr = settings.get("lr_scale", 1.0), settings.get("lr")
    if scale != 1.0 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (scale, lr)):
        settings["lr"] = lr * scale  # (a malformed value is left for the schema check to name)
    warmup = _resolved_warmup(cfg, settings)
    if warmup is not None:
        settings["warmup"] = warmup  # the seed's warm-up, recorded (None from a random policy)
    return settings


def _layered(cfg: dict, explicit: dict) -> dict:
    """Train defaults, then the chosen algorithm's preset, then the explicit settings (nothing resolved yet)."""
    algorithm = explicit.get("algorithm", cfg["train"]["algorithm"])
    return {**cfg["train"], **cfg.get("algorithms", {}).get(algorithm, {}), **explicit}


def _resolved_warmup(cfg: dict, settings: dict) -> int | None:
    """The `warmup` setting, else (a task with warm-ups) the seed's warm-up, recorded (None from a random policy)."""
    if settings.get("warmup") is None and settings.get("task") in (cfg.get("sft") or {}):
        return warmup_of(cfg, settings)
    return settings.get("warmup")


def overridden(cfg: dict, spec: RunSpec, changes: dict) -> RunSettings:
    """`spec`'s settings with `changes` (`mathrl train --run RUN KEY=VALUE`) by `dataclasses.replace`: each value is the
    one the run trains with. The changes are checked as an experiment's blocks are (the train schema: an unknown key
    is named, with the close ones); a change whose meaning depends on how the settings were resolved is refused
    (`_check_resolved_keys`: a preset's algorithm, lr_scale, lr beside an lr_scale). A change of seed, task, init or
    warmup picks the warm-up as `run_settings` does: the seed's, unless the experiment or the change names one. So
    the result is `run_settings` of the experiment's and the changed settings, wherever a change is not refused."""
    check_changes(changes)
    _check_lr_or_scale(changes, "run (its KEY=VALUE changes)")
    _check_resolved_keys(cfg, spec, changes)
    settings = dataclasses.replace(spec.settings, **changes)
    if changes.keys() & {"seed", "task", "init", "warmup"}:
        asked = changes["warmup"] if "warmup" in changes else _layered(cfg, spec.explicit).get("warmup")
        settings = dataclasses.replace(settings, warmup=_resolved_warmup(cfg, {**settings.as_dict(), "warmup": asked}))
    return settings


def check_changes(changes: dict) -> None:
    """`mathrl train`'s KEY=VALUE changes against the train schema, as an experiment's blocks are: an unknown key is
    named (with the close ones), a malformed value too."""
    validate(changes, prefix="run", validator=_train_validator())


def _check_resolved_keys(cfg: dict, spec: RunSpec, changes: dict) -> None:
    """Refuse the changes of `overridden` that one key cannot make: swapping an algorithm preset, and an LR stated
    against `lr_scale` (the settings' lr has its lr_scale applied already)."""
    s, presets = spec.settings, cfg.get("algorithms") or {}
    new = changes.get("algorithm", s.algorithm)
    if new != s.algorithm and (s.algorithm in presets or new in presets):
        named = ", ".join(f"algorithms.{a}" for a in (s.algorithm, new) if a in presets)
        raise ConfigError(
            f"run.algorithm: {new}: run {spec.run_id}'s settings were resolved for {s.algorithm}, and changing one "
            f"key cannot swap the config's algorithm presets ({named}); train algorithm={new} as an ad hoc run "
            f"(without --run), or as a variant of experiment {spec.experiment}"
        )
    if "lr_scale" in changes and "lr" not in changes and changes["lr_scale"] != s.lr_scale:
        raise ConfigError(
            f"run.lr_scale: run {spec.run_id}'s lr ({s.lr:g}) has its lr_scale ({s.lr_scale:g}) applied already (lr "
            f"is the LR a run trains with); give the LR to train with instead: lr=VALUE"
            + (" lr_scale=1.0" if s.lr_scale != 1.0 else "")
        )
    if "lr" in changes and "lr_scale" not in changes and s.lr_scale != 1.0:
        raise ConfigError(
            f"run.lr: run {spec.run_id} trains at its reference LR times lr_scale {s.lr_scale:g} (lr {s.lr:g}); a "
            f"changed lr is the LR to train with, so set lr_scale=1.0 with it: lr={changes['lr']} lr_scale=1.0"
        )


def _check_lr_or_scale(block: dict, where: str) -> None:
    """One block sets `lr` or `lr_scale`, not both: layered files merge a variant's keys, so an
    absolute `lr` from one file times the `lr_scale` of another trains at their product."""
    if "lr" in block and block.get("lr_scale", 1.0) != 1.0:
        raise ConfigError(
            f"{where}: sets both lr ({block['lr']}) and lr_scale ({block['lr_scale']}), so it would train at their "
            "product; lr_scale multiplies the reference LR (train.lr or the experiment's fixed lr): keep one "
            "(a file layered over config/config.yaml may have added the other)"
        )


def _check_blocks(name: str, exp: dict, origin=None) -> None:
    """Each block of an experiment (fixed, a variant, each grid value) against the train
    schema on its own, so that an error names the block it was written in (and its file),
    not the run the blocks merge into."""
    blocks = [(["fixed"], exp.get("fixed") or {})]
    blocks += [(["variants", variant], vsettings or {}) for variant, vsettings in (exp.get("variants") or {}).items()]
    blocks += [(["grid"], {key: value}) for key, values in (exp.get("grid") or {}).items() for value in values]
    for path, block in blocks:
        where = ["experiments", name, *path]
        came_from = (lambda key, where=where: origin([*where, *key])) if origin else None
        validate(block, prefix=".".join(where), validator=_train_validator(), origin=came_from)


def _check_variant_seeds(name: str, exp: dict, origin=None) -> None:
    """`variant_seeds` names variants of the experiment, and adds seeds to the experiment's (a
    variant with more seeds keeps the others' seeds, so that its comparisons stay paired by seed)."""
    for variant, seeds in (exp.get("variant_seeds") or {}).items():
        key = ["experiments", name, "variant_seeds", variant]
        came_from = f" (from {origin(key)})" if origin else ""
        allowed = list(exp.get("variants") or {})
        if variant not in allowed:
            raise ConfigError(
                f"{'.'.join(key)}: {variant!r} is not a variant of {name}{_suggest(variant, allowed)}; "
                f"allowed: {', '.join(allowed) or 'none (the experiment has no variants)'}{came_from}"
            )
        missing = sorted(set(exp["seeds"]) - set(seeds))
        if missing:
            raise ConfigError(
                f"{'.'.join(key)}: lacks the experiment's seeds {missing}; a variant may add seeds, not drop them"
                f"{came_from}"
            )


def point_label(point: dict) -> str:
    """A grid point as a role names it: `batch_size=512` (keys in the grid's order)."""
    return ", ".join(f"{k}={'none' if v is None else v}" for k, v in point.items())


def _check_roles(name: str, exp: dict, points: list[dict], origin=None) -> None:
    """Each role names a variant of the experiment, or one of its grid points (`key=value`)."""
    variants = list(exp.get("variants") or {})
    allowed = variants or [point_label(p) for p in points if p]
    for role, target in (exp.get("roles") or {}).items():
        if target not in allowed:
            key = ["experiments", name, "roles", role]
            came_from = origin(key) if origin else None
            raise ConfigError(
                f"{'.'.join(key)}: {target!r} is not a {'variant' if variants else 'grid point'} of {name}"
                f"{_suggest(target, allowed) if variants else ''}; allowed: {', '.join(allowed) or 'none'}"
                + (f" (from {came_from})" if came_from else "")
            )


def expand_runs(cfg: dict, origin=None) -> dict[str, RunSpec]:
    """All runs of all experiments, by run id `{experiment}__{variant}_{key}-{value}__s{seed}`.

    Runs whose resolved settings are equal (another experiment's reference cell, say) are
    trained once: under the smallest of their ids, whatever order the experiments come in
    (Snakemake's config and the CLI's sorted dump of it must agree); the others name it in
    `same_as` and their results are read from there."""
    runs: dict[str, RunSpec] = {}
    first_of: dict[str, str] = {}  # settings hash -> the smallest run id with those settings
    cell_of: dict[tuple[str, str], str] = {}  # (experiment, settings hash) -> its first run id
    for name, exp in cfg["experiments"].items():
        variants = exp.get("variants") or {None: {}}
        grid = exp.get("grid") or {}
        points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
        if not points:
            raise ConfigError(f"experiments.{name}: the grid expands to zero runs")
        _check_blocks(name, exp, origin)
        _check_roles(name, exp, points, origin)
        _check_variant_seeds(name, exp, origin)
        _check_lr_or_scale(exp.get("fixed") or {}, f"experiments.{name}.fixed")
        for variant, vsettings in variants.items():
            _check_lr_or_scale(vsettings or {}, f"experiments.{name}" + (f".variants.{variant}" if variant else ""))
        runs_of = [
            (variant, vsettings, point, seed)
            for variant, vsettings in variants.items()
            for point in points
            for seed in (exp.get("variant_seeds") or {}).get(variant, exp["seeds"])
        ]
        for variant, vsettings, point, seed in runs_of:
            # Grid keys in sorted order: a run id must not depend on how a YAML tool ordered them.
            parts = ([variant] if variant else []) + [f"{k}-{_fmt(point[k])}" for k in sorted(point)]
            run_id = f"{name}__{'_'.join(parts) or 'base'}__s{seed}"
            if not set(run_id) <= RUN_ID_CHARS:
                raise ConfigError(f"experiments.{name}: run id {run_id!r} has characters outside [A-Za-z0-9_.-]")
            explicit = {**exp.get("fixed", {}), **(vsettings or {}), **point, "seed": seed}
            settings = run_settings(cfg, explicit)
            where = f"experiments.{name}" + (f".variants.{variant}" if variant else "")
            check_train(cfg, settings, where)
            settings = RunSettings.from_dict(settings)  # typed and frozen from here on
            if run_id in runs:
                raise ConfigError(f"experiments.{name}: duplicate run id {run_id}")
            key = config_hash(settings.as_dict())
            twin = cell_of.setdefault((name, key), run_id)
            if twin != run_id:
                raise ConfigError(
                    f"experiments.{name}: runs {twin} and {run_id} have the same settings, so one of them tests "
                    "nothing (does a grid key repeat what a variant sets, or a layered file add a grid?)"
                )
            runs[run_id] = RunSpec(run_id, name, variant, point, seed, settings, explicit=explicit)
            first_of[key] = min(first_of.get(key, run_id), run_id)
    for spec in runs.values():  # the smallest id trains: independent of the order of experiments in any dump
        canonical = first_of[config_hash(spec.settings.as_dict())]
        spec.same_as = canonical if canonical != spec.run_id else None
    return runs


def trained_runs(cfg: dict) -> dict[str, RunSpec]:
    """The runs that are trained: every run of `expand_runs` but those that reuse another's."""
    return trained(expand_runs(cfg))


def trained(runs: dict[str, RunSpec]) -> dict[str, RunSpec]:
    """The runs of `runs` (expand_runs) that are trained: all but those that reuse another's."""
    return {run_id: spec for run_id, spec in runs.items() if spec.same_as is None}


def run_group(run_id: str) -> str:
    """The group a run is trained in: its id without the seed (`batch__b64__s3` -> `batch__b64`), so that the
    seeds of one setting are trained one after another by one pipeline job."""
    return run_id.rsplit("__s", 1)[0]


def run_groups(runs: dict[str, RunSpec]) -> dict[str, list[str]]:
    """{group: its run ids, in the runs' order} of `runs` (trained_runs)."""
    groups: dict[str, list[str]] = {}
    for run_id in runs:
        groups.setdefault(run_group(run_id), []).append(run_id)
    return groups


def config_hash(obj: Any) -> str:
    """A short stable hash of a JSON-able object (configs in summaries and reports)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


# Train keys added after runs were recorded, at the default that leaves a run exactly as it was (a test checks each
# default against the schema's): left out of a run's settings hash at that value, so adding them reruns no run.
NEUTRAL_DEFAULTS = {"token_selection": "all", "token_fraction": 0.2}


def run_hash(settings: dict) -> str:
    """The hash of a run's resolved settings that reruns it when it changes (Snakemake's params trigger)."""
    return config_hash({k: v for k, v in settings.items() if NEUTRAL_DEFAULTS.get(k, object()) != v})


def group_hash(runs: dict[str, RunSpec], run_ids: list[str]) -> str:
    """The hash of a group's runs' settings, the rerun trigger of the job that trains them (Snakemake's params,
    DVC's): a change to any reruns the group, whose other runs rewrite their outputs from their final snapshots."""
    return config_hash([run_hash(runs[run_id].settings.as_dict()) for run_id in run_ids])
