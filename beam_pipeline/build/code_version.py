"""The code that makes a layer, as part of its key.

A layer key (:func:`beam_pipeline.storage.layers.layer_key`) holds the stage's
version. This module makes that version follow the code: :func:`stage_version`
appends a digest of

* the syntax tree of every module of this package the stage's code imports,
  directly or through other modules, at module level or inside a function
  (docstrings and comments left out: editing them recomputes nothing), and
* the installed versions of the third-party distributions those modules
  import (resiliparse, tokenizers, fasttext, pyarrow, ...).

So editing a stage's code, or upgrading a library it uses, gives its layer a
new key: the rerun computes that stage and every stage downstream (their keys
hold their inputs' keys), and reuses everything else. The model and data files
a stage reads are in its stage config already, by sha256 (the language model,
the tokenizer, blocklists, evaluation sets). Parsing every module for this
takes most of a second, so each module's tree digest and import statements
are kept in its ``__pycache__``, keyed by a digest of its bytes (:func:`_facts`).

A scorer stage is a class in :mod:`beam_pipeline.transforms.score`, next to
the other scorers: its code is that module without the other scorers'
classes, plus what its own class imports. Editing the heuristics therefore
recomputes the ``heuristics`` layer, not the ``language`` one.

Apache Beam's version is left out on purpose: layer bytes do not depend on the
runner or the SDK (rows are partitioned by doc id and sorted inside a
partition; ``tests/test_flink_embedded.py`` compares every layer's bytes across
runners), and a Beam upgrade should not recompute a corpus.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import json
import os
import sys
import tempfile

from beam_pipeline.records.hashing import canonical_json, digest_json, sha256_bytes

PACKAGE = "beam_pipeline"

#: Stage name -> the module whose code makes the stage's layer (scorer stages: see :func:`stage_code`).
STAGE_MODULES = {
    "ingest": "beam_pipeline.transforms.ingest",
    "exact_dedup": "beam_pipeline.transforms.exact_dedup",
    "near_dedup": "beam_pipeline.transforms.near_dedup",
    "select": "beam_pipeline.transforms.select",
    "ngram_index": "beam_pipeline.transforms.ngram_index",
    "tokenize": "beam_pipeline.transforms.tokenize_shard",
}
SCORER_MODULE = "beam_pipeline.transforms.score"

#: The configuration schema: what it produces (the validated values, defaults filled in) is in each stage's
#: config, which is part of the layer key already; its code is not followed (else every stage would depend
#: on every filter, since the schema names them all).
CONFIG_MODULES = frozenset(
    {
        "beam_pipeline.config.corpus",
        "beam_pipeline.config.scorers",
        "beam_pipeline.config.extract",
        "beam_pipeline.config.landing",
        "beam_pipeline.dedup.config",
    }
)

#: Distributions that do not shape layer bytes (see the module docstring).
NOT_SHAPING = frozenset({"apache-beam"})


class UnknownStage(KeyError):
    """A stage with no known code: register its module in :data:`STAGE_MODULES`."""


def stage_version(stage: str, version: str) -> str:
    """``version`` followed by a digest of the stage's code and libraries: ``1+code.<16 hex>``."""
    return f"{version}+code.{stage_code(stage)['digest'][:16]}"


@functools.cache
def stage_code(stage: str) -> dict:
    """What makes the stage's layer: ``{"modules": {name: sha}, "libraries": {dist: version}, "digest"}``."""
    if stage in STAGE_MODULES:
        root = STAGE_MODULES[stage]
        modules = closure({root})
        trees = {name: _module_fingerprint(name) for name in _package_modules(modules)}
    else:
        scorer_class = _scorer_class(stage)
        scorer = _facts(SCORER_MODULE, keep=scorer_class)
        modules = closure(_resolve(scorer.imports, package_of=SCORER_MODULE)) - {SCORER_MODULE}
        trees = {name: _module_fingerprint(name) for name in _package_modules(modules)}
        trees[f"{SCORER_MODULE}:{scorer_class}"] = scorer.fingerprint
    libraries = _library_versions(frozenset(modules))
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {
        "modules": dict(sorted(trees.items())),
        "libraries": libraries,
        "python": python,
        "digest": digest_json({"modules": trees, "libraries": libraries, "python": python}),
    }


def _scorer_class(stage: str) -> str:
    from beam_pipeline.transforms.score import SCORERS

    if stage not in SCORERS:
        raise UnknownStage(f"no code known for stage {stage!r}: add its module to code_version.STAGE_MODULES")
    return SCORERS[stage].__name__


# --- the package's modules and their imports -------------------------------------------------------

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the folder holding this package


@functools.cache
def _module_file(module: str) -> str | None:
    """This package's source file of ``module`` (``a/b.py`` or ``a/b/__init__.py``), None if not one."""
    if module.split(".")[0] != PACKAGE:
        return None
    base = os.path.join(_ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _source_path(module: str) -> str:
    path = _module_file(module)
    if path is None:
        raise UnknownStage(f"no Python source for module {module}")
    return path


@functools.cache
def _tree(module: str) -> ast.Module:
    """The module's syntax tree without its docstrings, parsed once and shared: never modified after.

    Docstrings hold no imports, so :func:`imports_of` reads the same tree the fingerprint digests.
    """
    with open(_source_path(module), "rb") as f:
        tree = ast.parse(f.read(), filename=_source_path(module))
    _drop_docstrings(tree)
    return tree


@functools.cache
def _module_imports(module: str) -> frozenset[str]:
    return frozenset(_resolve(_facts(module).imports, package_of=module))


def _is_package(module: str) -> bool:
    return os.path.basename(_source_path(module)) == "__init__.py"


def imports_of(tree: ast.AST, package_of: str | None = None) -> set[str]:
    """Every module an ``import`` anywhere in ``tree`` names (this package's modules resolved, including
    ``from package import module``; third-party ones by their top-level name)."""
    return _resolve(_import_statements(tree), package_of)


def _import_statements(tree: ast.AST) -> list[list]:
    """The ``import`` statements of ``tree`` as JSON values: ``[0, [names]]`` for ``import a, b``,
    ``[level, module, [names]]`` for ``from module import names`` (``module`` "" for ``from . import``)."""
    statements: list[list] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            statements.append([0, [alias.name for alias in node.names]])
        elif isinstance(node, ast.ImportFrom):
            statements.append([node.level, node.module or "", [alias.name for alias in node.names]])
    return statements


def _resolve(statements: list[list], package_of: str | None) -> set[str]:
    """The modules :func:`_import_statements` name (see :func:`imports_of`)."""
    found: set[str] = set()
    for statement in statements:
        if len(statement) == 2:
            found.update(statement[1])
        else:
            level, base, names = statement
            if level:  # relative: resolved against the importing module's package
                if package_of is None:
                    raise ValueError("a relative import needs the importing module's name")
                parent = package_of if _is_package(package_of) else package_of.rpartition(".")[0]
                for _ in range(level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            for name in names:  # `from beam_pipeline.filters import heuristics` imports a module
                if _module_file(f"{base}.{name}") is not None:
                    found.add(f"{base}.{name}")
    return found


def _with_parents(module: str) -> set[str]:
    """A module and the packages above it (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def closure(modules: set[str]) -> set[str]:
    """``modules`` and everything they import, transitively: this package's modules by name and third-party
    ones by top-level name (the standard library left out)."""
    seen: set[str] = set()
    pending = list(modules)
    while pending:
        name = pending.pop()
        top = name.split(".")[0]
        if top != PACKAGE:
            if top and top not in sys.stdlib_module_names and top != "__future__":
                seen.add(top)
            continue
        if name in seen or name in CONFIG_MODULES or _module_file(name) is None:
            continue  # `from package import NAME` of a non-module NAME is resolved to the package already
        seen.add(name)
        pending.extend(_with_parents(name))
        pending.extend(_module_imports(name))
    return seen


def _package_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] == PACKAGE}


@functools.cache
def _module_fingerprint(module: str) -> str:
    return _facts(module).fingerprint


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the code digests read of a module: the digest of its syntax tree without docstrings, and its
    ``import`` statements (:func:`_import_statements`)."""

    fingerprint: str
    imports: list[list]


#: Changes when :class:`Facts` or the way they are computed changes: older cache files are then ignored.
FACTS_FORMAT = "code-facts-v1"


@functools.cache
def _facts(module: str, keep: str | None = None) -> Facts:
    """The :class:`Facts` of one of this package's modules (``keep``: of the scorer module with only that
    scorer's class, :func:`_scorer_module_tree`).

    Parsing and dumping the syntax trees of every module a build's stages import takes most of a second,
    on every build. So the facts are kept beside the module, in its ``__pycache__`` (like Python's own
    bytecode, and numba's compiled loops), keyed by a digest of the module's bytes, the Python version
    (``ast.dump`` may differ between versions), :data:`FACTS_FORMAT` and ``keep``: a file made from other
    bytes is never used, whatever its time stamps. Where the folder cannot be written (a read-only
    install) the facts are computed each time; the values are the same.
    """
    path = _source_path(module)
    with open(path, "rb") as f:
        source = f.read()
    others = sorted(_scorer_classes() - {keep}) if keep else []
    key = sha256_bytes(canonical_json([FACTS_FORMAT, sys.version, keep, others]) + b"\0" + source)
    name = os.path.basename(path)[: -len(".py")]
    cached = os.path.join(
        os.path.dirname(path),
        "__pycache__",
        f"{name}{'.' + keep if keep else ''}.{sys.implementation.cache_tag}.code-facts.json",
    )
    try:
        with open(cached, encoding="utf-8") as f:
            stored = json.load(f)
        if stored["key"] == key:
            return Facts(stored["fingerprint"], stored["imports"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not there yet, or unreadable: computed below
    tree = _scorer_module_tree(keep) if keep else _tree(module)
    facts = Facts(_digest(tree), _import_statements(tree))
    _write_quietly(cached, canonical_json({"key": key, **dataclasses.asdict(facts)}))
    return facts


def _write_quietly(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling (readers never see half a file); a folder that
    cannot be written is no error (the cache is only an optimization)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def _fingerprint(tree: ast.Module) -> str:
    """Digest of a module's code: its syntax tree without docstrings (comments are not in the tree).
    Removes the docstrings from ``tree`` itself."""
    _drop_docstrings(tree)
    return _digest(tree)


def _digest(tree: ast.Module) -> str:
    """Digest of a syntax tree whose docstrings are removed already."""
    return digest_json(ast.dump(tree, annotate_fields=False, include_attributes=False))


def _drop_docstrings(tree: ast.AST) -> None:
    """Removes the docstrings of the module, its classes and functions from ``tree`` itself."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]


def _scorer_classes() -> set[str]:
    from beam_pipeline.transforms.score import SCORERS

    return {cls.__name__ for cls in SCORERS.values()}


def _scorer_module_tree(keep: str) -> ast.Module:
    """:mod:`~beam_pipeline.transforms.score` without the scorer classes other than ``keep``."""
    others = _scorer_classes() - {keep}
    tree = _tree(SCORER_MODULE)  # shared: the new module takes its nodes and changes none of them
    return ast.Module(
        body=[node for node in tree.body if not (isinstance(node, ast.ClassDef) and node.name in others)],
        type_ignores=[],
    )


# --- third-party libraries ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _library_versions(modules: frozenset[str]) -> dict[str, str]:
    """``{distribution: version}`` of the third-party top-level modules among ``modules``."""
    by_module = _distributions()
    versions = {}
    for name in sorted(m for m in modules if "." not in m and m != PACKAGE):
        for dist in by_module.get(name, []):
            canonical = dist.lower().replace("_", "-")
            if canonical not in NOT_SHAPING:
                versions[canonical] = importlib.metadata.version(dist)
    return dict(sorted(versions.items()))
