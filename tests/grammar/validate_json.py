#!/usr/bin/env python3
"""Validates JSON texts against JSON Schemas with python-jsonschema, an implementation independent
of the grammar engine. Input: a JSON file with a list of {"schema": ..., "text": "..."}. Output (stdout):
a JSON list with, per case, "" when the text parses and validates, else the first error; "?" and
the reason when the validator itself cannot check the case (e.g. a pattern Python's re rejects).

JSON Schema patterns are ECMA-262 regexes; Python's re reads \\d, \\w, \\s, '.' and '$' differently
(Unicode digits, no U+FEFF in \\s, '.' matching U+2028, '$' before a final newline), so "pattern" is
checked after rewriting those to their ECMA-262 definitions."""
import json
import math
import re
import sys

import jsonschema
from jsonschema import ValidationError, validators

ECMA_CLASSES = {
    "d": "0-9",
    "w": "A-Za-z0-9_",
    "s": "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff",
}


def ecma_to_python(pattern):
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in ECMA_CLASSES:
                out.append(ECMA_CLASSES[e] if in_class else "[" + ECMA_CLASSES[e] + "]")
            elif e.lower() in ECMA_CLASSES and not in_class:
                out.append("[^" + ECMA_CLASSES[e.lower()] + "]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == "." and not in_class:
            c = "[^\\n\\r\\u2028\\u2029]"
        elif c == "$" and not in_class:
            c = "\\Z"
        out.append(c)
        i += 1
    return "".join(out)


def ecma_pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not re.search(ecma_to_python(pattern), instance):
        yield ValidationError("%r does not match %r" % (instance, pattern))


class FloatOverflow(Exception):
    pass


def parse_float(literal):
    value = float(literal)
    if math.isinf(value):  # valid JSON, but beyond what Python's validator can compare
        raise FloatOverflow(literal)
    return value


def check(schema, text):
    try:
        instance = json.loads(text, parse_float=parse_float)
    except FloatOverflow as e:
        return "?number %s overflows a double" % e
    except ValueError as e:
        return "not JSON: %s" % e
    try:
        base = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls = validators.extend(base, {"pattern": ecma_pattern})
        checker = getattr(base, "FORMAT_CHECKER", None) or jsonschema.FormatChecker()
        validator = cls(schema, format_checker=checker)
        for error in validator.iter_errors(instance):
            return error.message
    except Exception as e:  # the validator cannot judge this case
        return "?%s: %s" % (type(e).__name__, e)
    return ""


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    json.dump([check(c["schema"], c["text"]) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
