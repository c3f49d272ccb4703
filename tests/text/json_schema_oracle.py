#!/usr/bin/python3
"""Soundness of the JSON Schema compiler against python3-jsonschema: for each schema below,
random documents of its grammar (grammar_sample) must all parse as JSON and validate, formats
included; every schema must yield documents. Usage: json_schema_oracle.py GRAMMAR_SAMPLE.
Exit 77 (skip) without python3-jsonschema."""
import datetime
import json
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed")
    sys.exit(77)

SCHEMAS = [
    {"type": "object"},
    {"type": "array"},
    {},
    {"type": ["string", "integer", "null"]},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"type": "integer", "minimum": -1234, "maximum": 98765},
    {"type": "integer", "exclusiveMinimum": -10, "exclusiveMaximum": 10},
    {"type": "integer", "minimum": 17},
    {"type": "integer", "maximum": -17},
    {"type": "number", "minimum": -2.5, "maximum": 3.75},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number"},
    {"enum": ["a", 1, None, True, {"x": [1, 2]}, [3], "\u00e9\"\\"]},
    {"const": {"k": "v"}},
    {"type": "string", "enum": ["a", 1, None, "b"]},
    {"type": "object", "required": ["z"], "additionalProperties": {"type": "integer"}},
    {"type": "object", "required": ["z", "y"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
     "c": {"type": "boolean"}}, "required": ["b"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string"}, "na": {"const": 1}},
     "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"x": {"type": "null"}}, "additionalProperties": True},
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "boolean"}}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}],
     "items": {"type": "null"}, "minItems": 1, "maxItems": 5},
    {"type": "array", "prefixItems": [{"const": 1}, {"const": 2}], "items": False},
    {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "object", "properties":
     {"z": {"type": "integer"}}, "required": ["z"], "additionalProperties": False}]},
    {"oneOf": [{"type": "integer", "minimum": 5}, {"type": "boolean"}]},
    {"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}, "v": {"type": "integer"}},
                "required": ["k", "v"]},
               {"type": "object", "properties": {"k": {"enum": ["b", "c"]}, "w": {}},
                "required": ["k"]}]},
    {"type": "object", "properties": {"t": {"enum": ["a", "b"]}}, "required": ["t"],
     "additionalProperties": False, "anyOf": [{"properties": {"t": {"const": "a"}}},
                                                {"properties": {"t": {"const": "b"}}}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}},
                "required": ["a"]},
               {"properties": {"a": {"maximum": 9}, "b": {"type": "string"}},
                "required": ["b"]}]},
    {"allOf": [{"properties": {"a": {"type": "integer"}, "b": {}}}],
     "properties": {"a": {"minimum": 3}}, "additionalProperties": False},
    {"$defs": {"tree": {"type": "object", "properties": {"v": {"type": "integer"},
     "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}, "maxItems": 2}},
     "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/tree"},
    {"definitions": {"s": {"type": "string", "maxLength": 2}}, "type": "array",
     "items": {"$ref": "#/definitions/s"}},
    {"type": "object", "properties": {"n": {"type": "integer", "nullable": True}},
     "required": ["n"], "additionalProperties": False},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "email"},
    {"type": "string", "pattern": "^[A-Z][a-z]{1,3}(-[0-9]+)?$"},
    {"type": "string", "pattern": "ab|cd"},
    {"type": "string", "pattern": "^[^\"\\\\x]{2}\\.\\d\\w\\s$"},
    {"type": "string", "pattern": "^(?:\u00e9|\\n|\\t)+$"},
    {"type": "object", "properties": {"a\"b": {"const": 1}, "\u00fc": {"const": 2}},
     "additionalProperties": {"const": 3}},
]


def format_checker():
    """Draft 2020-12's checkers, plus RFC 3339 time and date-time (which need packages Debian
    does not install; datetime.fromisoformat of Python 3.11 reads them, with an offset)."""
    fc = jsonschema.Draft202012Validator.FORMAT_CHECKER

    @fc.checks("date-time", raises=ValueError)
    def date_time(s):
        return not isinstance(s, str) or datetime.datetime.fromisoformat(s).tzinfo is not None

    @fc.checks("time", raises=ValueError)
    def time(s):
        return not isinstance(s, str) or date_time("1970-01-01T" + s)

    return fc


def for_validator(s):
    """OpenAPI's nullable (which the compiler takes) as JSON Schema: type plus "null"."""
    if isinstance(s, dict):
        s = {k: for_validator(v) for k, v in s.items()}
        if s.pop("nullable", False) and "type" in s:
            s["type"] = (s["type"] if isinstance(s["type"], list) else [s["type"]]) + ["null"]
        return s
    if isinstance(s, list):
        return [for_validator(v) for v in s]
    return s


def main():
    sampler = sys.argv[1]
    lines = "".join(json.dumps(s) + "\n" for s in SCHEMAS)
    out = subprocess.run([sampler, "60", "7"], input=lines.encode(), capture_output=True,
                         check=True).stdout.decode().split("\n")
    blocks, cur = [], []
    for line in out:
        if line == "--":
            blocks.append(cur)
            cur = []
        elif line:
            cur.append(line)
    assert len(blocks) == len(SCHEMAS), (len(blocks), len(SCHEMAS))
    checked = 0
    checker = format_checker()
    for schema, docs in zip(SCHEMAS, blocks):
        if docs and docs[0].startswith("ERR"):
            raise AssertionError(f"{json.dumps(schema)} refused: {docs[0]}")
        assert docs, f"{json.dumps(schema)}: no document finished"
        for h in docs:
            text = bytes.fromhex(h).decode("utf-8")
            doc = json.loads(text)
            try:
                jsonschema.Draft202012Validator(for_validator(schema),
                                                format_checker=checker).validate(doc)
            except jsonschema.ValidationError as e:
                raise AssertionError(f"{json.dumps(schema)}: {text!r} is invalid: {e.message}")
            checked += 1
    print(f"PASS: {checked} documents of {len(SCHEMAS)} schemas validate")


main()
