"""Checks real answers of the admin listener against openapi/admin.yaml.

Usage: admin_schema.py DOCUMENT < answers.json

answers.json is a list of {"path": "/debug/clients?pretty", "status": 200,
"content_type": "application/json", "body": "<the body as received>"}. For
each, the operation of the path (query left off) and the response of the
status must be documented, the content type must be one the response
documents, and a JSON body must validate against its schema with
openapi-schema-validator's OpenAPI 3.0 dialect (nullable, formats checked).
Prints one line per answer; exits 1 if any does not match.
"""

import json
import sys

import yaml
from openapi_schema_validator import OAS30Validator, oas30_format_checker


def schema_of(doc, path, status, content_type):
    operation = doc["paths"].get(path.split("?", 1)[0], {}).get("get")
    if operation is None:
        raise LookupError(f"no GET {path} in the document")
    response = operation["responses"].get(str(status))
    if response is None:
        raise LookupError(f"GET {path}: status {status} is not documented")
    if "$ref" in response:
        name = response["$ref"].rsplit("/", 1)[-1]
        response = doc["components"]["responses"][name]
    media = content_type.split(";", 1)[0].strip()
    content = response.get("content", {})
    if media not in content:
        raise LookupError(
            f"GET {path} {status}: content type {media!r} is not documented ({sorted(content)})"
        )
    # Local $refs resolve against the document's components.
    schema = dict(content[media]["schema"])
    schema["components"] = doc["components"]
    return media, schema


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    answers = json.load(sys.stdin)
    failed = 0
    for answer in answers:
        where = f"GET {answer['path']} -> {answer['status']}"
        try:
            media, schema = schema_of(doc, answer["path"], answer["status"], answer["content_type"])
            body = answer["body"]
            instance = json.loads(body) if media.endswith("json") else body
            validator = OAS30Validator(schema, format_checker=oas30_format_checker)
            errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
            if errors:
                failed += 1
                for error in errors:
                    at = "/".join(str(p) for p in error.absolute_path)
                    print(f"FAIL {where}: at /{at}: {error.message}")
            else:
                print(f"ok   {where}")
        except (LookupError, ValueError) as e:
            failed += 1
            print(f"FAIL {where}: {e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
