#!/usr/bin/env python3
"""Prints the chart's values table (Markdown) from values.schema.json and values.yaml.

One row per leaf of the schema (an object with its own `properties` is descended into; maps,
lists and scalars are leaves): the dotted key, its type (with the allowed values of an enum
and the bounds of a number), its default from values.yaml, and the schema's description.
deploy/generate.sh puts the table into README.md between the values-table markers; it is
never edited by hand.

Usage: deploy/helm/values-table.py CHART_DIR
"""
import json
import os
import sys

import yaml

# A default longer than this is summarised; values.yaml has it in full.
MAX_DEFAULT = 60
UNSET = object()


def cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def prose(text):
    """Description text: `<name>` placeholders are not HTML tags."""
    return cell(str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def type_of(schema):
    t = schema.get("type")
    if t is None and "oneOf" in schema:
        return " or ".join(type_of(s) for s in schema["oneOf"])
    if isinstance(t, list):
        return " or ".join(t)
    if t == "array":
        items = schema.get("items", {})
        return f"list of {type_of(items)}" if items else "list"
    if t == "object" and "properties" not in schema:
        return "map"
    return t or "any"


def constraints(schema):
    """The enum or the numeric bounds of a leaf, as a short phrase."""
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" if v == "" else f"`{v}`" for v in schema["enum"])
    bounds = []
    if "minimum" in schema and schema.get("type") in ("integer", "number"):
        bounds.append(f"≥ {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"≤ {schema['maximum']}")
    return ", ".join(bounds)


def default_of(value):
    if value is UNSET:
        return "(unset)"
    text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False)
    if len(text) > MAX_DEFAULT:
        if isinstance(value, list):
            return f"({len(value)} items, see values.yaml)"
        if isinstance(value, dict):
            return f"({len(value)} keys, see values.yaml)"
        return text[: MAX_DEFAULT - 1] + "…"
    return f"`{text}`"


def rows(schema, values, prefix=""):
    for key, sub in schema.get("properties", {}).items():
        # A key with a dot of its own (memory.available) is quoted, as in `--set a."b.c"`.
        path = prefix + (f'"{key}"' if "." in key else key)
        value = values.get(key, UNSET) if isinstance(values, dict) else UNSET
        if sub.get("type") == "object" and "properties" in sub:
            yield from rows(sub, value if isinstance(value, dict) else {}, path + ".")
            continue
        desc = sub.get("description", "")
        extra = constraints(sub)
        yield (path, type_of(sub) + (f" ({extra})" if extra else ""), default_of(value), desc)


def table(chart):
    with open(os.path.join(chart, "values.schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    out = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for path, typ, default, desc in rows(schema, values):
        out.append(f"| `{cell(path)}` | {cell(typ)} | {cell(default)} | {prose(desc)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.stdout.write(table(sys.argv[1]))
