"""Post-processing of the OpenAPI schema drf-spectacular generates."""

from __future__ import annotations

from typing import Any


def require_one_of_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Mark a request body required when it is one of several shapes that each require fields.

    drf-spectacular decides "required" from a serializer's required fields, and a body that is
    one of several serializers (the selection request, by strategy) has none of its own, so an
    empty body would look valid to clients and fuzzers while the API refuses it.
    """
    schemas = result.get("components", {}).get("schemas", {})

    def requires_fields(ref: dict[str, Any]) -> bool:
        name = ref.get("$ref", "").rsplit("/", 1)[-1]
        return bool(schemas.get(name, {}).get("required"))

    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body or body.get("required"):
                continue
            for media in body.get("content", {}).values():
                ref = media.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
                choices = schemas.get(ref, {}).get("oneOf")
                if choices and all(requires_fields(choice) for choice in choices):
                    body["required"] = True
    return result
