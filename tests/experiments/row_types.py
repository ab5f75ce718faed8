"""Whether a parsed row fits the row types (`core.result_row`): used on the committed rows
(`core/test_result_row.py`) and on the rows each end-to-end test writes, so that a field a
pipeline adds without declaring it fails before a real run commits such a row."""

import types
import typing

# a float field holds a JSON number: an integral one may be written without a fraction
NUMBER = {float: (int, float)}


def problems(value, kind, where: str) -> list[str]:
    """Where `value` (parsed JSON) does not fit the annotation `kind`."""
    if kind is typing.Any:
        return []
    if typing.is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where} is {type(value).__name__}, not a {kind.__name__}"]
        hints = typing.get_type_hints(kind)
        found = [f"{where}.{k} is not declared in {kind.__name__}" for k in value if k not in hints]
        found += [f"{where}.{k} is missing" for k in kind.__required_keys__ if k not in value]
        for key in value.keys() & hints.keys():
            found += problems(value[key], hints[key], f"{where}.{key}")
        return found
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        arms = [problems(value, arm, where) for arm in typing.get_args(kind)]
        return [] if any(not arm for arm in arms) else arms[0]
    if kind is type(None):
        return [] if value is None else [f"{where} is {value!r}, not None"]
    expected = origin or kind
    if isinstance(value, bool) and expected is not bool:
        return [f"{where} is a bool, not {expected.__name__}"]
    if not isinstance(value, NUMBER.get(expected, expected)):
        return [f"{where} is {type(value).__name__}, not {expected.__name__}"]
    return []
