"""YAML documents read with bounded work and no silent loss: aliases that expand exponentially
("billion laughs"), a node that contains itself, nesting thousands deep and a key given twice in one
mapping are refused before anything walks the data.

    >>> documents = load_yaml_documents("a: &x [1, 2]\\nb: *x\\n", source="demo.yaml")
    >>> [data for _, data in documents]
    [{'a': [1, 2], 'b': [1, 2]}]
    >>> bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\\n" + "".join(
    ...     f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\\n" for i in range(6))
    >>> load_yaml_documents(bomb, source="bomb.yaml")
    Traceback (most recent call last):
    ...
    simbench.errors.InputError: bomb.yaml:5: the YAML holds more than 100,000 values (counting each use of an alias, &name / *name, in full), far more than any scenario needs
"""

from __future__ import annotations

from typing import Any

import yaml

from simbench.errors import InputError
from simbench.validation import MAX_INTEGER_DIGITS

# Far beyond any scenario or hardware profile (a few hundred values), far below what hangs a validator.
MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = 100
_TOO_MANY_VALUES = (f"the YAML holds more than {MAX_EXPANDED_NODES:,} values (counting each use of an alias, "
                    "&name / *name, in full), far more than any scenario needs")


def load_yaml_documents(text: str, source: str) -> list[tuple[yaml.Node, Any]]:
    """Each document's node tree (for line numbers) and its data; YAML syntax errors, runaway aliases
    and deep nesting are InputErrors naming the file and line."""
    _check_node_count(text, source)
    try:
        roots = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        raise InputError(f"not valid YAML: {problem}", source=source, line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise InputError(f"the YAML is nested more than {MAX_DEPTH} levels deep", source=source) from None
    documents = []
    for root in roots:
        if root is None:
            continue
        _check_bounded(root, source)
        loader = yaml.SafeLoader("")
        try:
            documents.append((root, loader.construct_document(root)))
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise InputError(f"not valid YAML: {getattr(error, 'problem', None) or error}", source=source,
                             line=mark.line + 1 if mark else None) from None
        finally:
            loader.dispose()
    return documents


def _check_node_count(text: str, source: str) -> None:
    """Refuse a file with more values than the limit before composing it: composing a megabyte of YAML in
    Python takes tens of seconds, counting its first events with libyaml a fraction of one. Expanded
    aliases are counted later; here each value counts once, so nothing under the limit is refused."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    values = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                values += 1
                if values > MAX_EXPANDED_NODES:
                    raise InputError(_TOO_MANY_VALUES, source=source, line=event.start_mark.line + 1)
    except yaml.YAMLError:
        return  # composing the file below names the syntax error with its line


def _check_bounded(root: yaml.Node, source: str) -> None:
    """Count values as the data will hold them (an alias counts its whole target again) and the depth,
    each node visited once (iteratively: no recursion limit to hit)."""
    expanded: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            _check_unique_keys(node, source)
            children = _children(node)
            expanded[key] = 1 + sum(expanded[id(child)] for child in children)
            depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
            if expanded[key] > MAX_EXPANDED_NODES:
                raise InputError(_TOO_MANY_VALUES, source=source, line=node.start_mark.line + 1)
            if depth[key] > MAX_DEPTH:
                raise InputError(f"the YAML is nested more than {MAX_DEPTH} levels deep", source=source,
                                 line=node.start_mark.line + 1)
            continue
        if key in expanded:
            continue
        _check_integer_size(node, source)
        if key in on_path:
            raise InputError("a YAML alias refers to a value that contains it", source=source,
                             line=node.start_mark.line + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in expanded)


def _check_integer_size(node: yaml.Node, source: str) -> None:
    """An integer of thousands of digits is a mistake, and Python refuses to read one past 4,300 digits with a
    ValueError of its own: named here, with its line, instead."""
    if (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int"
            and len(node.value) > MAX_INTEGER_DIGITS):
        raise InputError(f"an integer of {len(node.value):,} characters; simbench reads whole numbers of up to "
                         f"{MAX_INTEGER_DIGITS} digits", source=source, line=node.start_mark.line + 1)


def _check_unique_keys(node: yaml.Node, source: str) -> None:
    """YAML would keep the last of two equal keys without a word; a repeated key is a mistake to name."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
            line = key.start_mark.line + 1
            if key.value in seen:
                raise InputError(f"key {key.value!r} appears twice in one mapping (lines {seen[key.value]} and "
                                 f"{line}); YAML would silently keep the last", source=source, line=line)
            seen[key.value] = line


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
